//! `execve` on argument and environment arrays built before the clone.

use std::ffi::{CStr, CString, c_char};

use nix::libc;

use super::errno::{self, Errno};

/// Strings and the null-terminated array of pointers to them that `execve`
/// takes, built (and allocated) before a clone, read in place after it.
#[derive(Debug)]
pub(crate) struct CStrArray {
    /// Owns what `pointers` points at; never changed after construction.
    _strings: Vec<CString>,
    /// One pointer per string, then a null one.
    pointers: Vec<*const c_char>,
}

impl CStrArray {
    /// The array of `strings`.
    pub(crate) fn new(strings: Vec<CString>) -> Self {
        let pointers = strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        Self {
            _strings: strings,
            pointers,
        }
    }
}

/// `execve(program, argv, envp)`; returns only on failure, with its `errno`.
pub(crate) fn execve(program: &CStr, argv: &CStrArray, envp: &CStrArray) -> Errno {
    // SAFETY: `program` is NUL-terminated; `argv` and `envp` are null-terminated
    // arrays of pointers into NUL-terminated strings they own, alive for the call.
    unsafe {
        libc::execve(
            program.as_ptr(),
            argv.pointers.as_ptr(),
            envp.pointers.as_ptr(),
        )
    };
    errno::last()
}
