//! Changes a patch cannot carry, recorded instead of dropped.
//!
//! An export never loses a change without a word: a path the patch format cannot
//! carry under its name (not UTF-8), one `git apply` would refuse to write (`.git`
//! in any spelling, a symlinked `.gitmodules`, ...) and a nested repository's
//! `.git` are each kept as an [`Uncarried`] change, listed in `changes.json` with
//! the reason, and left out of the patch. A run with such a change is never
//! promoted.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use workspace_core::boundary::{ChangeKind, NotInPatch};

/// A change listed in `changes.json` but not carried by the patch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uncarried {
    /// The path relative to the workspace root, as shown (see [`shown_name`]).
    pub path: String,
    /// What happened to it.
    pub kind: ChangeKind,
    /// Why the patch does not carry it.
    pub reason: NotInPatch,
}

/// `name` as text: UTF-8 as it is, every byte that is not part of valid UTF-8 as
/// `\xNN` (so a name that is not UTF-8 can still be named, and never passes for
/// another: it is only ever shown, never looked up).
pub fn shown_name(name: &OsStr) -> String {
    let mut out = String::new();
    for chunk in name.as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// `name` under the directory `prefix` (`""` for the root), shown as text.
pub(crate) fn shown_path(prefix: &str, name: &OsStr) -> String {
    let name = shown_name(name);
    if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use super::{shown_name, shown_path};

    #[test]
    fn changes_uncarried_names_show_bytes_that_are_not_utf8() {
        assert_eq!(shown_name(OsStr::from_bytes(b"caf\xc3\xa9")), "café");
        assert_eq!(shown_name(OsStr::from_bytes(b"a\xffb\xc3")), "a\\xffb\\xc3");
        assert_eq!(shown_path("d", OsStr::from_bytes(b"\xfe")), "d/\\xfe");
        assert_eq!(shown_path("", OsStr::from_bytes(b"x")), "x");
    }
}
