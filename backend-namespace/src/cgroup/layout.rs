//! Finding the cgroup hierarchies of this host and deciding where each controller lives.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{CgroupError, Controller, fsio};

/// Where one controller is used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "hierarchy", rename_all = "snake_case")]
pub enum Placement {
    /// On the cgroup v2 hierarchy ([`CgroupLayout::unified`]).
    V2,
    /// On the cgroup v1 hierarchy mounted at `mount`.
    V1 {
        /// The mount point of the v1 hierarchy carrying the controller.
        mount: PathBuf,
    },
    /// Not available on this host.
    Missing {
        /// What detection found.
        reason: String,
    },
}

/// The cgroup hierarchies of this host and the hierarchy chosen for each controller.
///
/// Built by [`CgroupLayout::detect`]; the `with_*`/`without_*` methods override a
/// detected choice (to force v1, or to describe a host without a controller).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupLayout {
    unified: Option<PathBuf>,
    unified_controllers: Vec<String>,
    memory: Placement,
    pids: Placement,
    cpu: Placement,
    freezer_v1: Option<PathBuf>,
    #[serde(default)]
    cpuacct_v1: Option<PathBuf>,
}

/// One cgroup mount found in the mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CgroupMount {
    pub(crate) mount_point: PathBuf,
    /// `true` for `cgroup2`, `false` for a v1 `cgroup` mount.
    pub(crate) v2: bool,
    /// The superblock options (for v1 they name the controllers).
    pub(crate) options: Vec<String>,
}

const MOUNTINFO: &str = "/proc/self/mountinfo";
const MOUNTS: &str = "/proc/mounts";

impl CgroupLayout {
    /// Detects the layout of this host.
    ///
    /// Reads `/proc/self/mountinfo` (else `/proc/mounts`) for `cgroup2` and v1
    /// `cgroup` mounts and the v2 root's `cgroup.controllers`. A controller goes on
    /// v2 if the v2 root offers it, else on its v1 mount, else it is
    /// [`Placement::Missing`]. For a caller that is not root, the layout is
    /// what an ordinary user can use of it: on a hybrid host, no v2 hierarchy unless a controller a run needs is there.
    ///
    /// # Ambient authority
    /// Reads the host's mount table, cgroup files and effective uid.
    pub fn detect() -> Result<Self, CgroupError> {
        let mounts = match std::fs::read_to_string(MOUNTINFO) {
            Ok(text) => parse_mountinfo(&text),
            Err(first) => match std::fs::read_to_string(MOUNTS) {
                Ok(text) => parse_proc_mounts(&text),
                Err(_) => {
                    return Err(CgroupError::ReadMountTable {
                        path: PathBuf::from(MOUNTINFO),
                        source: first,
                    });
                }
            },
        };
        let unified = pick_unified(&mounts);
        let unified_controllers = match &unified {
            Some(root) => fsio::read(&root.join("cgroup.controllers"))?
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            None => Vec::new(),
        };
        let layout = Self::decide(&mounts, unified, unified_controllers);
        Ok(if nix::unistd::geteuid().is_root() {
            layout
        } else {
            layout.for_an_ordinary_user()
        })
    }

    /// What an ordinary user's runs use of this layout: on a hybrid host whose
    /// v2 hierarchy carries no controller a run needs, none of it. There it would
    /// only track and kill, which the v1 hierarchies and the v1 freezer do as well,
    /// and an ordinary user cannot move a process into it at all: v2 asks for
    /// write access to the `cgroup.procs` of the closest common ancestor of the
    /// old and new groups, here the root's.
    pub(crate) fn for_an_ordinary_user(self) -> Self {
        let needs_v2 = Controller::ALL
            .into_iter()
            .any(|c| *self.placement(c) == Placement::V2);
        if self.unified.is_some() && !needs_v2 && self.freezer_v1.is_some() {
            self.without_unified()
        } else {
            self
        }
    }

    /// Decides the placements from parsed mounts and the v2 root's controllers.
    pub(crate) fn decide(
        mounts: &[CgroupMount],
        unified: Option<PathBuf>,
        unified_controllers: Vec<String>,
    ) -> Self {
        let place = |name: &str| -> Placement {
            if unified.is_some() && unified_controllers.iter().any(|c| c == name) {
                return Placement::V2;
            }
            match v1_mount(mounts, name) {
                Some(mount) => Placement::V1 { mount },
                None => Placement::Missing {
                    reason: match &unified {
                        Some(root) => format!(
                            "not in {}/cgroup.controllers ({:?}) and no v1 mount with it",
                            root.display(),
                            unified_controllers.join(" ")
                        ),
                        None => "no cgroup2 mount and no v1 mount with it".to_owned(),
                    },
                },
            }
        };
        Self {
            memory: place("memory"),
            pids: place("pids"),
            cpu: place("cpu"),
            freezer_v1: v1_mount(mounts, "freezer"),
            cpuacct_v1: v1_mount(mounts, "cpuacct"),
            unified_controllers: unified_controllers.clone(),
            unified,
        }
    }

    /// The mount point of the cgroup v2 hierarchy, if there is one.
    pub fn unified(&self) -> Option<&Path> {
        self.unified.as_deref()
    }

    /// The controllers the v2 root offers (its `cgroup.controllers`).
    pub fn unified_controllers(&self) -> &[String] {
        &self.unified_controllers
    }

    /// Where `controller` is used.
    pub fn placement(&self, controller: Controller) -> &Placement {
        match controller {
            Controller::Memory => &self.memory,
            Controller::Pids => &self.pids,
            Controller::Cpu => &self.cpu,
        }
    }

    /// The mount point of the v1 freezer hierarchy, if there is one.
    pub fn freezer_v1(&self) -> Option<&Path> {
        self.freezer_v1.as_deref()
    }

    /// This layout with `controller` placed as given (e.g. `Missing`, or forced to v1).
    pub fn with_placement(mut self, controller: Controller, placement: Placement) -> Self {
        match controller {
            Controller::Memory => self.memory = placement,
            Controller::Pids => self.pids = placement,
            Controller::Cpu => self.cpu = placement,
        }
        self
    }

    /// This layout without the v2 hierarchy: controllers placed on v2 become
    /// `Missing`, and runs are killed through the v1 freezer (or by signals alone).
    pub fn without_unified(mut self) -> Self {
        self.unified = None;
        self.unified_controllers.clear();
        for controller in Controller::ALL {
            if *self.placement(controller) == Placement::V2 {
                self = self.with_placement(
                    controller,
                    Placement::Missing {
                        reason: "the v2 hierarchy was removed from the layout".to_owned(),
                    },
                );
            }
        }
        self
    }

    /// The v1 `cpuacct` hierarchy, where a run's CPU time is counted when the
    /// layout has no v2 hierarchy (whose every group counts it in `cpu.stat`):
    /// an ordinary user's runs on a hybrid host, runs on a pure v1 host.
    pub fn cpuacct_v1(&self) -> Option<&Path> {
        self.cpuacct_v1
            .as_deref()
            .filter(|_| self.unified.is_none())
    }

    /// This layout without the v1 freezer.
    pub fn without_freezer(mut self) -> Self {
        self.freezer_v1 = None;
        self
    }
}

/// The v2 mount to use: `/sys/fs/cgroup`, else `/sys/fs/cgroup/unified`, else the first.
fn pick_unified(mounts: &[CgroupMount]) -> Option<PathBuf> {
    let v2: Vec<&CgroupMount> = mounts.iter().filter(|m| m.v2).collect();
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .find_map(|want| {
            v2.iter()
                .find(|m| m.mount_point == Path::new(want))
                .map(|m| m.mount_point.clone())
        })
        .or_else(|| v2.first().map(|m| m.mount_point.clone()))
}

/// The v1 mount carrying `controller`, preferring one under `/sys/fs/cgroup`.
fn v1_mount(mounts: &[CgroupMount], controller: &str) -> Option<PathBuf> {
    let mut with: Vec<&CgroupMount> = mounts
        .iter()
        .filter(|m| !m.v2 && m.options.iter().any(|o| o == controller))
        .collect();
    with.sort_by_key(|m| !m.mount_point.starts_with("/sys/fs/cgroup"));
    with.first().map(|m| m.mount_point.clone())
}

/// Parses `/proc/self/mountinfo`, keeping cgroup mounts.
///
/// A line is `id parent maj:min root mount-point options [optional...] - fstype source super-options`.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let _source = right.next()?;
            let options = right.next().unwrap_or("");
            cgroup_mount(fstype, mount_point, options)
        })
        .collect()
}

/// Parses `/proc/mounts` (`source mount-point fstype options 0 0`), keeping cgroup mounts.
pub(crate) fn parse_proc_mounts(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let _source = fields.next()?;
            let mount_point = fields.next()?;
            let fstype = fields.next()?;
            let options = fields.next().unwrap_or("");
            cgroup_mount(fstype, mount_point, options)
        })
        .collect()
}

fn cgroup_mount(fstype: &str, mount_point: &str, options: &str) -> Option<CgroupMount> {
    let v2 = match fstype {
        "cgroup2" => true,
        "cgroup" => false,
        _ => return None,
    };
    Some(CgroupMount {
        mount_point: PathBuf::from(unescape(mount_point)),
        v2,
        options: options.split(',').map(str::to_owned).collect(),
    })
}

/// Undoes the kernel's octal escapes (`\040` for a space) in mount-table paths.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                let value = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
";

    #[test]
    fn cgroup_mountinfo_hybrid_without_v2_controllers_uses_v1() {
        let mounts = parse_mountinfo(HYBRID);
        assert_eq!(mounts.len(), 7);
        let unified = pick_unified(&mounts);
        assert_eq!(
            unified.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        let layout = CgroupLayout::decide(&mounts, unified, vec!["hugetlb".into()]);
        assert_eq!(
            layout.placement(Controller::Memory),
            &Placement::V1 {
                mount: "/sys/fs/cgroup/memory".into()
            }
        );
        assert_eq!(
            layout.placement(Controller::Cpu),
            &Placement::V1 {
                mount: "/sys/fs/cgroup/cpu".into()
            }
        );
        assert_eq!(
            layout.freezer_v1(),
            Some(Path::new("/sys/fs/cgroup/freezer"))
        );
    }

    #[test]
    fn an_ordinary_user_leaves_out_a_v2_hierarchy_only_when_no_controller_is_there() {
        let mounts = parse_mountinfo(HYBRID);
        let bare = CgroupLayout::decide(&mounts, pick_unified(&mounts), Vec::new());
        let user = bare.clone().for_an_ordinary_user();
        assert_eq!(user.unified(), None);
        assert_eq!(
            user.placement(Controller::Memory),
            bare.placement(Controller::Memory)
        );
        let with_memory =
            CgroupLayout::decide(&mounts, pick_unified(&mounts), vec!["memory".into()]);
        assert_eq!(with_memory.clone().for_an_ordinary_user(), with_memory);
    }

    #[test]
    fn cgroup_v2_controller_wins_over_v1_and_missing_is_typed() {
        let mounts = parse_mountinfo(HYBRID);
        let layout = CgroupLayout::decide(
            &mounts,
            pick_unified(&mounts),
            vec!["memory".into(), "pids".into()],
        );
        assert_eq!(layout.placement(Controller::Memory), &Placement::V2);
        assert_eq!(layout.placement(Controller::Pids), &Placement::V2);
        let layout = layout.without_unified();
        assert!(matches!(
            layout.placement(Controller::Memory),
            Placement::Missing { .. }
        ));
        let none = CgroupLayout::decide(&[], None, Vec::new());
        assert!(matches!(
            none.placement(Controller::Cpu),
            Placement::Missing { .. }
        ));
    }

    #[test]
    fn cgroup_proc_mounts_and_escapes() {
        let text = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n\
                    cgroup /mnt/my\\040cg cgroup rw,cpu,cpuacct 0 0\n\
                    proc /proc proc rw 0 0\n";
        let mounts = parse_proc_mounts(text);
        assert_eq!(mounts.len(), 2);
        assert_eq!(
            pick_unified(&mounts).as_deref(),
            Some(Path::new("/sys/fs/cgroup"))
        );
        assert_eq!(
            v1_mount(&mounts, "cpu").as_deref(),
            Some(Path::new("/mnt/my cg"))
        );
        assert_eq!(v1_mount(&mounts, "memory"), None);
    }

    #[test]
    fn cgroup_detect_on_this_host_finds_memory_pids_cpu() {
        let layout = match CgroupLayout::detect() {
            Ok(layout) => layout,
            Err(e) => panic!("cgroup layout detection failed on this host: {e}"),
        };
        println!("{layout:#?}");
        for controller in Controller::ALL {
            if let Placement::Missing { reason } = layout.placement(controller) {
                panic!("the {controller} controller is missing on this host: {reason}");
            }
        }
    }
}
