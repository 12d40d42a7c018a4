//! Host-side Filesystem boundary: [`PathGrants`], capability-safe file access for
//! an agent framework's own file tools (`read_file`, `edit_file`, ...), keeping the
//! contract's filesystem section exactly as the sandbox does.
//!
//! ```no_run
//! use backend_worktree::filesystem::{GrantOptions, PathGrants};
//! use workspace_core::contract::FilesystemSection;
//!
//! # fn main() -> Result<(), backend_worktree::filesystem::GrantError> {
//! let section = FilesystemSection {
//!     writable: vec!["src".into()],
//!     read_only: vec!["vendor".into()],
//!     excluded: vec!["secrets/**".into()],
//!     ..FilesystemSection::default()
//! };
//! let grants = PathGrants::new_opts(
//!     std::path::Path::new("/tmp/ws"),
//!     &section,
//!     GrantOptions::protected(["**/*.pem"]),
//! )?;
//! let text = grants.read_to_string("src/lib.rs")?;
//! grants.write("src/lib.rs", text.replace("foo", "bar").as_bytes())?;
//! assert!(grants.read("../outside/secret.txt").is_err());
//! # Ok(())
//! # }
//! ```
//!
//! # Rules
//!
//! - A path from the agent is relative: empty paths, NUL bytes, absolute paths
//!   (hence `/proc/self/...` aliases) and any `..` component are refused before
//!   anything is looked up.
//! - It is then resolved one component at a time under the root capability
//!   (`cap_std::fs::Dir`): symlinks inside the workspace are followed (at most 40),
//!   absolute link targets and `..` above the root are refused, and every name on
//!   the way is checked. The rules apply to the requested path *and* to where it
//!   leads.
//! - Reading needs the path not excluded (`filesystem.excluded`, a directory match
//!   covers what is below it) and not protected: `**/.env`, `**/.env.*`,
//!   `**/.git/config`, `**/.git/hooks/**`, and [`GrantOptions::protected`].
//! - Writing (write, create, remove, mkdir, both ends of rename, symlink) also
//!   needs the path under a writable path or an output, under no read-only path
//!   (read-only wins), and outside `**/.git/**`.
//! - File contents are read or written only for a regular file with one link:
//!   a hard link in a fresh checkout can only have been planted. The opened file
//!   is checked again (same inode, one link) before reading or truncating.
//!
//! Residual risks: a racer inside the workspace can swap an entry between the
//! check and the open; cap-std still confines the open to the root and the inode
//! check catches a swapped final file, but a FIFO swapped in can make a read
//! block (opening with `O_NONBLOCK`/`O_NOFOLLOW` needs `cap-fs-ext`).
//!
//! # Attack catalogue
//!
//! | attack | what stops it | test |
//! |---|---|---|
//! | `../outside/secret.txt` read | `..` refused while parsing | `dotdot_traversal_read` |
//! | `src/../../outside/x` write | `..` refused while parsing | `dotdot_traversal_write` |
//! | `/etc/passwd`, the sentinel's absolute path | absolute refused while parsing | `absolute_path_read` |
//! | `/proc/self/root/...`, a link to `/proc/self/root` | absolute path / absolute link target | `proc_self_root_alias` |
//! | planted file symlink to the sentinel | absolute or escaping target refused by the walk | `planted_symlink_to_outside_file` |
//! | planted dir symlink `out -> ../outside` | `..` above the root in a link target | `planted_symlink_dir_to_outside` |
//! | `symlink("/abs", ..)`, `symlink("../../outside/..", ..)` | target checked before creating | `create_escaping_symlink` |
//! | hard link to the sentinel planted inside | `nlink > 1` refused | `planted_hard_link_to_outside` |
//! | in-root symlink to `.env` | rules applied to the resolved path | `symlink_to_env_inside` |
//! | writing `.git/config`, `.git/hooks/post-checkout` | `**/.git/**` not writable | `write_git_metadata` |
//! | reading `.env`, `sub/.env.local`, `.git/config` | protected globs | `read_env_and_git_config` |
//! | writing `vendor/x`, or via a writable symlink to `vendor` | read-only wins, resolved path checked | `write_read_only_and_via_symlink` |
//! | rename onto read-only/excluded, or a dir holding them | both ends + subtree checked | `rename_onto_read_only_or_excluded` |
//! | rename from outside via `..` | `..` refused while parsing | `rename_from_outside` |
//! | NUL byte in a name | refused while parsing | `nul_byte_in_name` |
//! | `list()` revealing excluded entries or following links | entries filtered, kinds from the entry | `list_hides_excluded_and_shows_symlinks` |
//! | symlink loop | at most 40 hops | `symlink_loop` |
//! | reading a FIFO or excluded entry via an in-root link | regular files only, walk checks every name | `fifo_and_excluded_via_link` |

mod boundary;
mod error;
mod grants;
mod mutate;
mod path;
mod policy;
mod resolve;
mod types;

#[cfg(test)]
mod tests;

pub use boundary::WorktreeFilesystem;
pub use error::{GrantError, Operation, Refusal};
pub use grants::PathGrants;
pub use resolve::MAX_HOPS;
pub use types::{DirEntryInfo, EntryKind, GrantOptions, MetadataInfo};

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PathGrants>();
};
