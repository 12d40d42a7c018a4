//! [`ProcessBoundary`] for [`NamespaceProcess`]: seal, commands, suspend and
//! resume, teardown and recovery of a run's live sandbox.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use workspace_core::boundary::{
    Attachment, BoundaryError, CommandSpec, DiskRecord, DiskUsage, Execution, FileAccess,
    FileError, LeakReport, ObservedBoundary, ProcessBoundary, ProcessCapabilities, RunContext,
    RunDisks, SealPlan, Suspension, TerminateReport,
};
use workspace_core::contract::{Assurance, IsolationLevel};

use super::keeper;
use super::output;
use super::seal::{self, Sealed};
use super::{
    NamespaceProcess, ProcessError, blocking, egress, in_sandbox, network, probe, state, terminate,
};
use crate::cgroup::{CgroupLayout, RunCgroup, leaked_paths};
use crate::disk::LoopDisks;

#[async_trait]
impl ProcessBoundary for NamespaceProcess {
    fn capabilities(&self) -> ProcessCapabilities {
        ProcessCapabilities {
            isolation: vec![IsolationLevel::Task],
            private_network: true,
            service_templates: true,
            // Pid 1 keeps the capacity ticket's lock open (`SealPlan::held_open`).
            holds_capacity: true,
            output_files: true,
            // Pid 1 forwards each published port's host listener into the run.
            preview_ports: true,
            images: false,
            disk_caps: crate::disk::available(),
        }
    }

    async fn make_disk(
        &self,
        run: &RunContext,
        cap_bytes: u64,
    ) -> Result<DiskRecord, BoundaryError> {
        LoopDisks.make(run, cap_bytes).await
    }

    async fn remount_disk(
        &self,
        run: &RunContext,
        cap_bytes: u64,
    ) -> Result<DiskRecord, BoundaryError> {
        LoopDisks.remount(run, cap_bytes).await
    }

    async fn disk_usage(&self, run: &RunContext) -> Result<Option<DiskUsage>, BoundaryError> {
        LoopDisks.usage(run).await
    }

    async fn remove_disk(&self, run: &RunContext) -> Result<(), BoundaryError> {
        LoopDisks.remove(run).await
    }

    fn name(&self) -> &'static str {
        "backend-namespace process"
    }

    async fn seal(
        &self,
        run: &RunContext,
        plan: &SealPlan,
    ) -> Result<ObservedBoundary, BoundaryError> {
        const OP: &str = "seal";
        if self.runs().contains_key(&run.run_id) {
            return Err(ProcessError::AlreadySealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        }
        tracing::info!(run_id = %run.run_id, "sealing the run");
        let expected = seal::expected(run, plan);
        let (run_c, plan_c, options) = (run.clone(), plan.clone(), Arc::clone(&self.options));
        let result = blocking("sealing the run", move || {
            let (sealed, shell) = seal::prepare(&run_c, &plan_c, &options)?;
            let expected = workspace_core::observation::Expected {
                mount_points: sealed.mount_points.clone(),
                host_ids: seal::host_ids(&plan_c, &options).ok(),
                ..expected
            };
            match probe::probe(&sealed, shell, &expected, options.probe_timeout) {
                Ok(observed) => Ok((sealed, observed)),
                Err(e) => {
                    stop(sealed, &run_c.run_dir);
                    Err(e)
                }
            }
        })
        .await;
        let (sealed, mut observed) = result.map_err(|e| e.into_boundary(OP))?;
        observed.previews = sealed.previews.clone();
        let network = network::observe(&sealed, plan.environment.network)
            .await
            .map_err(|e| e.into_boundary(OP))?;
        if let Some(mismatch) = network.mismatch() {
            observed.mismatches.push(mismatch);
        }
        observed
            .facts
            .insert("network".into(), serde_json::json!(network));
        // The limits as the kernel enforces them, read back from the cgroup files.
        let applied = sealed.cgroup.applied();
        match applied.read_back() {
            Ok(read) => {
                observed.mismatches.extend(applied.differences(&read));
                observed
                    .facts
                    .insert("limits".into(), serde_json::json!(read));
            }
            Err(e) => observed
                .mismatches
                .push(format!("the run's limits could not be read back: {e}")),
        }
        if !sealed.host_mounts.is_empty() {
            observed
                .facts
                .insert("host_mounts".into(), serde_json::json!(sealed.host_mounts));
        }
        observed.facts.insert(
            "handover".into(),
            serde_json::json!(
                sealed
                    .handover
                    .iter()
                    .map(|(dir, outcome)| serde_json::json!({
                        "dir": dir,
                        "outcome": outcome,
                    }))
                    .collect::<Vec<_>>()
            ),
        );
        if !observed.mismatches.is_empty() {
            if run.contract.environment.assurance == Assurance::Required {
                tracing::warn!(run_id = %run.run_id, mismatches = ?observed.mismatches,
                    "the boundary probe failed; sealing fails closed");
                let run_dir = run.run_dir.clone();
                let _ = blocking("stopping the sandbox of a failed seal", move || {
                    stop(sealed, &run_dir);
                    Ok(())
                })
                .await;
                return Err(ProcessError::Mismatch {
                    mismatches: observed.mismatches,
                }
                .into_boundary(OP));
            }
            tracing::warn!(run_id = %run.run_id, mismatches = ?observed.mismatches,
                "the boundary probe found mismatches (best effort: recorded)");
        }
        let mut runs = self.runs();
        if runs.contains_key(&run.run_id) {
            return Err(ProcessError::AlreadySealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        }
        runs.insert(run.run_id.clone(), sealed);
        tracing::info!(run_id = %run.run_id, "run sealed");
        Ok(observed)
    }

    async fn spawn(
        &self,
        run: &RunContext,
        command: &CommandSpec,
    ) -> Result<Box<dyn Execution>, BoundaryError> {
        const OP: &str = "spawn command";
        super::command::spawn(self.live(&run.run_id), run, command)
            .await
            .map_err(|e| e.into_boundary(OP))
    }

    fn files(&self, run: &RunContext) -> Result<Box<dyn FileAccess>, FileError> {
        // The run's sandbox as this instance holds it (sealed or attached),
        // acted on as the run's host ids (see `crate::files`).
        let gone = |e: ProcessError| FileError::SandboxGone {
            source: Box::new(e),
        };
        let live = self.live(&run.run_id).map_err(gone)?;
        let (uid, gid) = self
            .options
            .host_ids
            .of(live.spec.uid, live.spec.gid)
            .map_err(gone)?;
        Ok(Box::new(crate::files::NamespaceFiles::new(
            live.sandbox,
            uid,
            gid,
        )))
    }

    fn usage(&self, run: &RunContext) -> workspace_core::evidence::ResourceUsage {
        // The run's own cgroup: its counters are hierarchical, so they hold
        // every command's, service's and background process's.
        self.runs()
            .get(&run.run_id)
            .map(|sealed| sealed.cgroup.usage())
            .unwrap_or_default()
    }

    async fn teardown(&self, run: &RunContext) -> Result<LeakReport, BoundaryError> {
        const OP: &str = "teardown";
        let sealed = self.runs().remove(&run.run_id);
        let run_id = run.run_id.clone();
        let run_dir = run.run_dir.clone();
        let default_parent = self.options.cgroup_parent.clone();
        let report = blocking("tearing the run down", move || {
            // Where the sealing process made the run's cgroups, when it said.
            let recorded = state::read(&run_dir).ok().flatten();
            let parent = recorded.as_ref().map_or(default_parent.clone(), |saved| {
                saved.cgroup_parent_or(&default_parent).to_owned()
            });
            let (layout, cgroup, holder, egress) = match sealed {
                Some(Sealed {
                    cgroup,
                    layout,
                    holder,
                    egress,
                    ..
                }) => (layout, Some(cgroup), holder, egress),
                None => {
                    // Not sealed or attached by this instance (e.g. recovery after
                    // the runner died): find the run's cgroups by the names `seal`
                    // gives them.
                    let layout =
                        CgroupLayout::detect().map_err(|source| ProcessError::Cgroup {
                            step: "detecting the cgroup layout",
                            source,
                        })?;
                    let cgroup = RunCgroup::adopt(&layout, &parent, &run_id).map_err(|source| {
                        ProcessError::Cgroup {
                            step: "finding the cgroups of a run this instance did not seal",
                            source,
                        }
                    })?;
                    if cgroup.is_some() {
                        tracing::info!(run_id = %run_id,
                            "tearing down cgroups left by another instance");
                    }
                    (layout, cgroup.map(Arc::new), None, None)
                }
            };
            let mut processes = Vec::new();
            let mut stopped = 0;
            if let Some(cgroup) = cgroup {
                // What still runs besides the sandbox's pid 1 and the egress
                // proxy (each in a cgroup of its own).
                let own: Vec<u32> = [
                    seal::INIT_CGROUP,
                    egress::EGRESS_CGROUP,
                    keeper::OUTPUT_CGROUP,
                ]
                    .into_iter()
                    .filter_map(|name| cgroup.child(name))
                    .flat_map(|child| child.pids_in_one_hierarchy().unwrap_or_default())
                    .collect();
                stopped = cgroup
                    .pids_in_one_hierarchy()
                    .unwrap_or_default()
                    .iter()
                    .filter(|pid| !own.contains(pid))
                    .count();
                let (left, files) = std::thread::scope(|scope| {
                    // The run's files go while its processes end: nothing in the
                    // sandbox reaches them by name, and what still writes to an
                    // output file it holds writes to a removed file.
                    let files = scope.spawn(|| remove_files(&run_dir));
                    // Its pid 1 first, when this instance holds it: the kernel
                    // kills everything in its pid namespace with it, and its
                    // reaping is the moment they are all gone (no polling the
                    // cgroups meanwhile). A frozen v1 group would keep even a
                    // killed pid 1: thaw it first.
                    if let Some(mut holder) = holder {
                        if let Err(e) = cgroup.thaw() {
                            tracing::warn!(run_id = %run_id, error = %e, "thawing the run's processes failed");
                        }
                        let reaped = holder.kill().and_then(|()| holder.wait());
                        if let Err(e) = reaped {
                            tracing::warn!(run_id = %run_id, error = %e, "ending the sandbox's pid 1 failed");
                        }
                    }
                    // Every other process of the run ended, the output keepers
                    // copy what the pipes still hold before they go too.
                    keeper::settle(&cgroup);
                    // Then the whole cgroup (helpers joining it, and everything
                    // when another instance sealed the run) and its directories.
                    // What the removal could not end is what is left.
                    let left = match cgroup.remove() {
                        Ok(()) => Vec::new(),
                        Err(e) => {
                            tracing::warn!(run_id = %run_id, error = %e, "removing the run's cgroups failed");
                            cgroup.pids().unwrap_or_default()
                        }
                    };
                    (left, files.join())
                });
                if let Some(egress) = egress {
                    egress.reap();
                }
                processes = left;
                files.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
            } else {
                remove_files(&run_dir)?;
            }
            let cgroups = leaked_paths(&layout, &parent, &run_id).map_err(|source| {
                ProcessError::Cgroup {
                    step: "looking for the run's cgroups",
                    source,
                }
            })?;
            Ok(LeakReport {
                processes,
                mounts: Vec::new(),
                cgroups,
                stopped: u32::try_from(stopped).unwrap_or(u32::MAX),
            })
        })
        .await
        .map_err(|e| e.into_boundary(OP))?;
        tracing::info!(run_id = %run.run_id, clean = report.is_clean(), "run torn down");
        Ok(report)
    }

    async fn terminate(
        &self,
        run: &RunContext,
        grace: Duration,
    ) -> Result<TerminateReport, BoundaryError> {
        const OP: &str = "terminate";
        let live = self.live(&run.run_id).map_err(|e| e.into_boundary(OP))?;
        let report = blocking("stopping the run's processes", move || {
            terminate::terminate(&live.cgroup, grace)
        })
        .await
        .map_err(|e| e.into_boundary(OP))?;
        tracing::info!(run_id = %run.run_id, signalled = report.signalled, killed = report.killed,
            "the run's processes were asked to stop");
        Ok(report)
    }

    async fn connect(
        &self,
        run: &RunContext,
        port: u16,
    ) -> Result<tokio::net::TcpStream, BoundaryError> {
        const OP: &str = "connect";
        let live = self.live(&run.run_id).map_err(|e| e.into_boundary(OP))?;
        if live.sandbox.door().is_some() {
            let run_dir = run.run_dir.clone();
            return broker_connect(run_dir, port)
                .await
                .map_err(|e| e.into_boundary(OP));
        }
        let stream = blocking("connecting into the sandbox", move || {
            in_sandbox::connect(&live.sandbox, port, super::CONNECT_TIMEOUT)
        })
        .await
        .and_then(|stream| {
            stream
                .set_nonblocking(true)
                .map_err(|source| ProcessError::Connect { port, source })?;
            tokio::net::TcpStream::from_std(stream)
                .map_err(|source| ProcessError::Connect { port, source })
        })
        .map_err(|e| e.into_boundary(OP))?;
        Ok(stream)
    }

    async fn detach(&self, run: &RunContext) -> Result<(), BoundaryError> {
        let Some(sealed) = self.runs().remove(&run.run_id) else {
            return Err(ProcessError::NotSealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary("detach"));
        };
        // Nothing is stopped: the sandbox and its cgroups outlive this handle, and
        // `attach` finds them again from the run's sandbox record.
        sealed.cgroup.release();
        if let Some(holder) = sealed.holder {
            holder.release();
        }
        tracing::info!(run_id = %run.run_id, "run detached; its sandbox stays live");
        Ok(())
    }

    async fn suspend(&self, run: &RunContext) -> Result<Suspension, BoundaryError> {
        const OP: &str = "suspend";
        let Some(sealed) = self.runs().remove(&run.run_id) else {
            return Err(ProcessError::NotSealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        };
        let cgroup = Arc::clone(&sealed.cgroup);
        let frozen = blocking("freezing the run's processes", move || {
            cgroup.freeze().map_err(|source| ProcessError::Cgroup {
                step: "freezing the run's processes",
                source,
            })?;
            Ok(cgroup.pids().unwrap_or_default())
        })
        .await;
        let processes = match frozen {
            Ok(processes) => processes,
            Err(e) => {
                // Not frozen: the run stays sealed here, for the runner to end.
                self.runs().insert(run.run_id.clone(), sealed);
                return Err(e.into_boundary(OP));
            }
        };
        // Frozen in place: let go as detach does; attach thaws them.
        sealed.cgroup.release();
        if let Some(holder) = sealed.holder {
            holder.release();
        }
        tracing::info!(run_id = %run.run_id, processes = processes.len(), "run frozen");
        Ok(Suspension::Frozen { processes })
    }

    async fn attach(&self, run: &RunContext, plan: &SealPlan) -> Result<Attachment, BoundaryError> {
        const OP: &str = "attach";
        if self.runs().contains_key(&run.run_id) {
            return Err(ProcessError::AlreadySealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        }
        let (run_c, plan_c, options) = (run.clone(), plan.clone(), Arc::clone(&self.options));
        let adopted = blocking("attaching the run's sandbox", move || {
            seal::adopt(&run_c, &plan_c, &options)
        })
        .await
        .map_err(|e| e.into_boundary(OP))?;
        let sealed = match adopted {
            Ok(sealed) => sealed,
            Err(reason) => {
                tracing::warn!(run_id = %run.run_id, %reason, "the run's sandbox is lost");
                return Ok(Attachment::Lost { reason });
            }
        };
        // A suspended run's processes are frozen: they go on from where they were.
        let cgroup = Arc::clone(&sealed.cgroup);
        let thawed = blocking("thawing the run's processes", move || {
            cgroup.thaw().map_err(|source| ProcessError::Cgroup {
                step: "thawing the run's processes",
                source,
            })
        })
        .await;
        if let Err(e) = thawed {
            sealed.cgroup.release();
            return Err(e.into_boundary(OP));
        }
        let processes = sealed.cgroup.pids().unwrap_or_default();
        tracing::info!(run_id = %run.run_id, pid = sealed.sandbox.pid(),
            processes = processes.len(), "run attached to its live sandbox");
        let mut runs = self.runs();
        if runs.contains_key(&run.run_id) {
            sealed.cgroup.release();
            return Err(ProcessError::AlreadySealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        }
        runs.insert(run.run_id.clone(), sealed);
        Ok(Attachment::Live { processes })
    }
}

/// Kills a sandbox that failed its seal and removes its cgroups and record.
fn stop(sealed: Sealed, run_dir: &std::path::Path) {
    if let Err(e) = sealed.cgroup.remove() {
        tracing::warn!(error = %e, "removing the cgroups of a failed seal failed");
    }
    if let Some(mut holder) = sealed.holder {
        let _ = holder.wait();
    }
    if let Err(e) = remove_files(run_dir) {
        tracing::warn!(error = %e, "removing the sandbox record of a failed seal failed");
    }
}

/// Removes the files the sandbox kept in the run directory: its record, its
/// commands' output, its connection broker's socket, the egress proxy's
/// configuration and stderr.
fn remove_files(run_dir: &std::path::Path) -> Result<(), ProcessError> {
    // Each is removed whatever became of the others; the first failure is
    // the one reported.
    let removed = [
        state::remove(run_dir),
        output::remove(run_dir),
        super::broker::remove(run_dir),
    ];
    egress::remove_files(run_dir);
    removed.into_iter().collect()
}

/// A connection to `port` inside the sandbox of `run_dir`, through its pid 1's
/// broker: the socket pid 1 made, once its connect completed (or failed).
async fn broker_connect(
    run_dir: std::path::PathBuf,
    port: u16,
) -> Result<tokio::net::TcpStream, ProcessError> {
    let failed = |source: std::io::Error| ProcessError::Connect { port, source };
    let stream = blocking("asking the sandbox's pid 1 for a connection", move || {
        super::broker::socket_for(&run_dir, port, super::CONNECT_TIMEOUT)
    })
    .await?;
    stream.set_nonblocking(true).map_err(failed)?;
    let stream = tokio::net::TcpStream::from_std(stream).map_err(failed)?;
    match tokio::time::timeout(super::CONNECT_TIMEOUT, stream.writable()).await {
        Ok(ready) => ready.map_err(failed)?,
        Err(_) => return Err(failed(std::io::ErrorKind::TimedOut.into())),
    }
    match stream.take_error().map_err(failed)? {
        Some(error) => Err(failed(error)),
        None => Ok(stream),
    }
}
