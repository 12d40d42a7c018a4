//! [`ProcessBoundary`] for [`ContainerProcess`]: one container per run, created
//! and started at seal, entered per command, paused, killed and deleted.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nix::sys::signal::Signal;
use workspace_core::boundary::{
    Attachment, BoundaryError, BoundaryKind, CommandSpec, DiskRecord, DiskUsage, Execution,
    KeptFiles, LeakReport, ObservedBoundary, ProcessBoundary, ProcessCapabilities, RunContext,
    RunDisks, SealPlan, Suspension, TerminateReport,
};
use workspace_core::contract::{Assurance, Contract, IsolationLevel, Problems};

use super::exec::{ContainerExecution, Followed};
use super::seal;
use super::{CONNECT_TIMEOUT, ContainerProcess, blocking, output, probe, remove};
use crate::error::ContainerError;

#[async_trait]
impl ProcessBoundary for ContainerProcess {
    fn capabilities(&self) -> ProcessCapabilities {
        ProcessCapabilities {
            isolation: vec![IsolationLevel::Task],
            private_network: true,
            // A copy per run (`template`): no idmapped mounts here.
            service_templates: true,
            // The container's pid 1 keeps the capacity ticket's lock open (`SealPlan::held_open`).
            holds_capacity: true,
            // A command writes to the files it is given; its streams follow them.
            output_files: true,
            // A forwarder program publishes them on the host's loopback.
            preview_ports: self.options.preview_forwarder.is_some(),
            images: true,
            // The disks it is given: the checkout and templates live there.
            disk_caps: self.options.disks.is_some(),
        }
    }

    fn name(&self) -> &'static str {
        "backend-container process"
    }

    /// A read-write host mount the container's host uid does not own (the
    /// runtime has no idmapped mounts to make it the run's).
    ///
    /// # Ambient authority
    /// Looks at the host directories the contract's read-write mounts name.
    fn refusals(&self, contract: &Contract, problems: &mut Problems) {
        let id = workspace_core::boundary::id_inside(contract.identity.user);
        let Some(host_uid) = self.options.host_id_base.checked_add(id) else {
            return;
        };
        for (field, why) in seal::unwritable_host_mounts(&contract.filesystem.host_mounts, host_uid)
        {
            problems.push(&field, format!("{} cannot keep {why}", self.name()));
        }
    }

    async fn make_disk(
        &self,
        run: &RunContext,
        cap_bytes: u64,
    ) -> Result<DiskRecord, BoundaryError> {
        self.disks("make the run's disk")?
            .make(run, cap_bytes)
            .await
    }

    async fn remount_disk(
        &self,
        run: &RunContext,
        cap_bytes: u64,
    ) -> Result<DiskRecord, BoundaryError> {
        self.disks("mount the run's disk again")?
            .remount(run, cap_bytes)
            .await
    }

    async fn disk_usage(&self, run: &RunContext) -> Result<Option<DiskUsage>, BoundaryError> {
        match &self.options.disks {
            Some(disks) => disks.usage(run).await,
            None => Ok(None),
        }
    }

    async fn remove_disk(&self, run: &RunContext) -> Result<(), BoundaryError> {
        match &self.options.disks {
            Some(disks) => disks.remove(run).await,
            None => Ok(()),
        }
    }

    async fn seal(
        &self,
        run: &RunContext,
        plan: &SealPlan,
    ) -> Result<ObservedBoundary, BoundaryError> {
        const OP: &str = "seal";
        if self.runs().contains_key(&run.run_id) {
            return Err(ContainerError::AlreadySealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        }
        let (run_c, plan_c, options) = (run.clone(), plan.clone(), Arc::clone(&self.options));
        let result = blocking("sealing the run", move || {
            let prepared = match seal::prepare(&run_c, &plan_c, &options) {
                Ok(prepared) => prepared,
                Err(e) => {
                    let _ = remove(
                        &options,
                        run_c.run_id.as_str(),
                        &seal::cgroups_path(&options, &run_c),
                        &run_c.run_dir.join(seal::BUNDLE_DIR),
                    );
                    return Err(e);
                }
            };
            let observed = probe::probe(
                &options.runtime,
                &prepared.live.template,
                &prepared.live.cgroups,
                &prepared.live.workdir,
                &prepared.expected,
                options.probe_timeout,
            );
            match observed {
                Ok(observed) => Ok((prepared, observed)),
                Err(e) => {
                    let _ = remove(
                        &options,
                        &prepared.live.id,
                        &seal::cgroups_path(&options, &run_c),
                        &prepared.live.bundle,
                    );
                    Err(e)
                }
            }
        })
        .await;
        let (prepared, mut observed) = result.map_err(|e| e.into_boundary(OP))?;
        observed.previews = prepared.previews.clone();
        let runtime = &self.options.runtime;
        observed.facts.insert(
            "runtime".into(),
            serde_json::json!({ "name": runtime.name(), "version": runtime.version() }),
        );
        observed.facts.insert(
            "mount_plan_sha256".into(),
            serde_json::json!(prepared.mount_plan_sha256),
        );
        observed.facts.insert(
            "handover".into(),
            serde_json::json!({ "changed": prepared.handed_over }),
        );
        if let Some(image) = &prepared.image {
            // The record is of the unpacking (its reference the one it was
            // unpacked for); the reference is this run's.
            observed.facts.insert(
                "image".into(),
                serde_json::json!({
                    "reference": run.contract.environment.runtime.image,
                    "record": image.record,
                    "reused": image.reused,
                }),
            );
        }
        let live = Arc::new(prepared.live);
        if !observed.mismatches.is_empty()
            && run.contract.environment.assurance == Assurance::Required
        {
            tracing::warn!(run_id = %run.run_id, mismatches = ?observed.mismatches,
                "the boundary probe failed; sealing fails closed");
            let (options, cgroups_path) = (
                Arc::clone(&self.options),
                seal::cgroups_path(&self.options, run),
            );
            let live_c = Arc::clone(&live);
            let _ = blocking("removing the container of a failed seal", move || {
                remove(&options, &live_c.id, &cgroups_path, &live_c.bundle)
            })
            .await;
            return Err(BoundaryError::new(
                workspace_core::boundary::BoundaryKind::Process,
                OP,
                ContainerError::Lost {
                    what: format!(
                        "the boundary probe saw what the contract does not allow: {}",
                        observed.mismatches.join("; ")
                    ),
                },
            ));
        }
        tracing::info!(run_id = %run.run_id, runtime = runtime.name(), "container sealed");
        self.runs().insert(run.run_id.clone(), live);
        Ok(observed)
    }

    async fn spawn(
        &self,
        run: &RunContext,
        command: &CommandSpec,
    ) -> Result<Box<dyn Execution>, BoundaryError> {
        const OP: &str = "spawn";
        if command.tty {
            return Err(ContainerError::Unsupported {
                setting: "a terminal (tty) for a command".into(),
            }
            .into_boundary(OP));
        }
        let live = self.live(&run.run_id).map_err(|e| e.into_boundary(OP))?;
        let (runtime, spec) = (self.options.runtime.clone(), command.clone());
        let keepers = self.options.output_keepers.clone();
        let execution = blocking("starting a command", move || {
            // The runner's number, when it gave one (commands of one run start
            // from several processes); a process it did not number (a service,
            // a background command) is of another series, so that the two
            // never meet.
            let (name, cgroup) = match spec.number {
                Some(n) => (seal::command_cgroup_name(n), live.command_cgroup(n)?),
                None => {
                    let n = live.next_background.fetch_add(1, Ordering::Relaxed);
                    let name = seal::background_cgroup_name(n);
                    let cgroup = live.cgroups.create_child(&name)?;
                    (name, cgroup)
                }
            };
            let cwd = spec
                .workdir_under(&live.workdir)
                .map_err(|source| ContainerError::BadCwd { source })?;
            let files = spec
                .output
                .as_ref()
                .map(output::OutputFiles::open)
                .transpose()?;
            let bound = spec.output.as_ref().and_then(|o| o.bound);
            let (write_ends, followed, flush) = match files {
                Some(files) => {
                    let follow = spec.output.as_ref().is_some_and(|o| o.follow);
                    let followed = follow.then_some((files.stdout.1, files.stderr.1));
                    match &keepers {
                        // The command gets the keeper's pipes; the files are the
                        // keeper's alone (this side's write ends go here).
                        Some(keepers) => {
                            let group = live.cgroups.create_child(output::OUTPUT_CGROUP)?;
                            let kept = keepers
                                .start(KeptFiles {
                                    stdout: files.stdout.0.as_fd(),
                                    stderr: files.stderr.0.as_fd(),
                                    // The output cap, never the disk's.
                                    bound,
                                    followed: follow,
                                    cgroup_procs: group.procs_files(),
                                })
                                .map_err(|source| ContainerError::OutputKeeper { source })?;
                            (Some((kept.stdout, kept.stderr)), followed, Some(kept.flush))
                        }
                        None => (Some((files.stdout.0, files.stderr.0)), followed, None),
                    }
                }
                None => (None, None, None),
            };
            // After the mkdirs above, which the lock's switch would hold up;
            // kept until the process runs.
            let ready = super::migration_lock::keep_ready();
            // The command's own variables over the container's.
            let mut template = live.template.clone();
            spec.apply_env(&mut template.env)
                .map_err(|source| ContainerError::InvalidEnv { source })?;
            let started = template.start(
                &runtime,
                (&name, &cgroup.procs_file()),
                (spec.argv.clone(), &cwd),
                super::exec::Streams {
                    input: None,
                    output: write_ends,
                },
                // Once this one runs: the next numbered command's.
                || {
                    if let Some(n) = spec.number {
                        live.make_ahead(n.saturating_add(1));
                    }
                },
            );
            let started = match started {
                Ok(started) => started,
                Err(e) => {
                    // Whatever the runtime left of it.
                    let _ = cgroup.kill_all();
                    return Err(e);
                }
            };
            drop(ready);
            tracing::info!(container = %live.id, pid = ?started.pid, cgroup = %name,
                argv = ?spec.argv, "command started in the container");
            ContainerExecution::new(
                started,
                cgroup,
                spec.timeout_ms.or(live.wall_time_ms),
                Followed {
                    files: followed,
                    flush,
                    bound,
                },
            )
        })
        .await
        .map_err(|e| e.into_boundary(OP))?;
        Ok(Box::new(execution))
    }

    fn usage(&self, run: &RunContext) -> workspace_core::evidence::ResourceUsage {
        // The container's cgroup: its counters hold every command's too.
        self.live(&run.run_id)
            .map(|live| live.cgroups.usage())
            .unwrap_or_default()
    }

    async fn teardown(&self, run: &RunContext) -> Result<LeakReport, BoundaryError> {
        const OP: &str = "teardown";
        let live = self.runs().remove(&run.run_id);
        let (options, id) = (Arc::clone(&self.options), run.run_id.to_string());
        let cgroups_path = seal::cgroups_path(&self.options, run);
        let bundle = run.run_dir.join(seal::BUNDLE_DIR);
        let report = blocking("removing the container", move || {
            if let Some(live) = live {
                live.settle();
            }
            remove(&options, &id, &cgroups_path, &bundle)
        })
        .await
        .map_err(|e| e.into_boundary(OP))?;
        tracing::info!(run_id = %run.run_id, clean = report.is_clean(), "container removed");
        Ok(report)
    }

    async fn terminate(
        &self,
        run: &RunContext,
        grace: Duration,
    ) -> Result<TerminateReport, BoundaryError> {
        let live = self
            .live(&run.run_id)
            .map_err(|e| e.into_boundary("terminate"))?;
        blocking("stopping the run's processes", move || {
            // The output keepers end on their own once the processes whose
            // output they keep are gone.
            let groups: Vec<_> = live
                .cgroups
                .children()
                .iter()
                .filter(|name| *name != output::OUTPUT_CGROUP)
                .map(|name| live.cgroups.child(name))
                .collect();
            let mut report = TerminateReport::default();
            for group in &groups {
                report.signalled +=
                    u32::try_from(group.signal(Signal::SIGTERM)).unwrap_or(u32::MAX);
            }
            let deadline = Instant::now() + grace;
            while groups.iter().any(|g| !g.pids().is_empty()) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            for group in &groups {
                let left = group.pids().len();
                if left > 0 {
                    report.killed += u32::try_from(left).unwrap_or(u32::MAX);
                    group.kill_all()?;
                }
            }
            Ok(report)
        })
        .await
        .map_err(|e| e.into_boundary("terminate"))
    }

    async fn connect(
        &self,
        run: &RunContext,
        port: u16,
    ) -> Result<tokio::net::TcpStream, BoundaryError> {
        const OP: &str = "connect";
        let runtime = self.options.runtime.clone();
        let id = run.run_id.to_string();
        let stream = blocking("connecting into the container", move || {
            let pid = runtime
                .state(&id)?
                .and_then(|s| *s.state.pid())
                .ok_or_else(|| ContainerError::Lost {
                    what: format!("container {id} does not run"),
                })?;
            connect_inside(pid, port)
        })
        .await
        .map_err(|e| e.into_boundary(OP))?;
        tokio::net::TcpStream::from_std(stream).map_err(|source| {
            ContainerError::Pipe {
                step: "registering a connection into the container",
                source,
            }
            .into_boundary(OP)
        })
    }

    async fn detach(&self, run: &RunContext) -> Result<(), BoundaryError> {
        // The container needs no runner: forgetting it is all.
        self.runs().remove(&run.run_id).map(drop).ok_or_else(|| {
            ContainerError::NotSealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary("detach")
        })
    }

    async fn suspend(&self, run: &RunContext) -> Result<Suspension, BoundaryError> {
        let live = self
            .live(&run.run_id)
            .map_err(|e| e.into_boundary("suspend"))?;
        let runtime = self.options.runtime.clone();
        let processes = blocking("pausing the container", move || {
            runtime.pause(&live.id)?;
            Ok(live.cgroups.pids())
        })
        .await
        .map_err(|e| e.into_boundary("suspend"))?;
        self.runs().remove(&run.run_id);
        Ok(Suspension::Frozen { processes })
    }

    async fn attach(&self, run: &RunContext, plan: &SealPlan) -> Result<Attachment, BoundaryError> {
        const OP: &str = "attach";
        let (run_c, plan_c, options) = (run.clone(), plan.clone(), Arc::clone(&self.options));
        let found = blocking("attaching to the container", move || {
            let id = run_c.run_id.to_string();
            let Some(status) = options.runtime.state(&id)? else {
                return Ok(None);
            };
            if status.paused {
                options.runtime.resume(&id)?;
            }
            let live = seal::reopen(&run_c, &plan_c, &options)?;
            Ok(Some(live))
        })
        .await
        .map_err(|e| e.into_boundary(OP))?;
        match found {
            None => Ok(Attachment::Lost {
                reason: format!(
                    "{} knows no container {}",
                    self.options.runtime.name(),
                    run.run_id
                ),
            }),
            Some(live) => {
                let processes = live.cgroups.pids();
                self.runs().insert(run.run_id.clone(), Arc::new(live));
                Ok(Attachment::Live { processes })
            }
        }
    }
}

/// Connects to `127.0.0.1:port` in the network namespace of `pid`, from a
/// thread that enters it (a network namespace is per thread: no other thread
/// of the host changes; the socket stays in the namespace it was made in).
fn connect_inside(pid: i32, port: u16) -> Result<TcpStream, ContainerError> {
    let pipe = |source| ContainerError::Pipe {
        step: "connecting into the container",
        source,
    };
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net")).map_err(pipe)?;
    std::thread::Builder::new()
        .name("aw-container-net".into())
        .spawn(move || {
            use std::os::fd::AsFd;
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)?;
            let stream = TcpStream::connect_timeout(
                &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
                CONNECT_TIMEOUT,
            )?;
            stream.set_nonblocking(true)?;
            Ok(stream)
        })
        .map_err(pipe)?
        .join()
        .map_err(|_| ContainerError::ThreadPanicked {
            step: "connecting into the container",
        })?
        .map_err(|e: std::io::Error| pipe(e))
}

impl ContainerProcess {
    /// The disks it was given; `operation` refused, naming this boundary,
    /// without (its capabilities claim no disk cap then).
    fn disks(&self, operation: &'static str) -> Result<&dyn RunDisks, BoundaryError> {
        self.options.disks.as_deref().ok_or_else(|| {
            BoundaryError::new(
                BoundaryKind::Process,
                operation,
                "backend-container process keeps no disk cap (no disks were given)",
            )
        })
    }
}
