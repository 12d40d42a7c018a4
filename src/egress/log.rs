//! `network.jsonl`: the proxy appends one [`NetworkAttempt`] per line.

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use workspace_core::egress::NetworkAttempt;

/// The attempt log, shared by every connection (one line per write, appended).
#[derive(Clone, Debug)]
pub(crate) struct AttemptLog {
    file: Arc<Mutex<File>>,
}

impl AttemptLog {
    /// The log appending to `file` (opened for appending by the caller).
    pub(crate) fn new(file: File) -> Self {
        Self {
            file: Arc::new(Mutex::new(file)),
        }
    }

    /// Appends `attempt`. A record that cannot be written is reported on
    /// stderr (the proxy's log in the run directory): the connection it
    /// describes is not held up for it.
    pub(crate) fn record(&self, attempt: &NetworkAttempt) {
        let mut line = match serde_json::to_vec(attempt) {
            Ok(line) => line,
            Err(e) => {
                eprintln!("egress proxy: recording an attempt: {e}");
                return;
            }
        };
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = file.write_all(&line) {
            eprintln!("egress proxy: recording an attempt: {e}");
        }
    }
}
