//! The child side of a re-executed test binary, seen from its parent: this very
//! binary started again with a role variable set, talking a line protocol on
//! stdin and stdout. Lines the child prints that start with the protocol's mark
//! are its messages; anything else on its stdout is ignored.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::Duration;

/// How long a message may take before the child is taken for hung (a guard
/// against a hang, not a timing assertion).
const HANG_GUARD: Duration = Duration::from_secs(60);

/// A re-executed child, killed and reaped when dropped, so a failing assertion
/// never leaves it behind.
pub struct ReExecChild {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl ReExecChild {
    /// Starts this binary again with `role_var=role` and `envs`, reading the
    /// messages it marks with `mark`.
    pub fn spawn<K, V>(
        (role_var, role): (&str, &str),
        envs: impl IntoIterator<Item = (K, V)>,
        mark: &'static str,
    ) -> Self
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(role_var, role)
            .envs(envs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some((_, message)) = line.split_once(mark)
                    && sender.send(message.to_string()).is_err()
                {
                    return;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next message within `within`, if any.
    pub fn line_within(&self, within: Duration) -> Option<String> {
        self.lines.recv_timeout(within).ok()
    }

    /// The next message; panics, naming `waiting_for`, if none comes.
    pub fn next_line(&self, waiting_for: &str) -> String {
        self.lines
            .recv_timeout(HANG_GUARD)
            .unwrap_or_else(|e| panic!("child never said {waiting_for:?}: {e}"))
    }

    /// Asserts that the next message is `expected`.
    pub fn expect(&self, expected: &str) {
        assert_eq!(self.next_line(expected), expected);
    }

    /// Sends `line` to the child.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits until the child ends.
    pub fn wait(&mut self) -> ExitStatus {
        self.child.wait().unwrap()
    }

    /// `SIGKILL`s the child and reaps it.
    pub fn kill(&mut self) -> ExitStatus {
        self.child.kill().unwrap();
        self.wait()
    }

    /// Closes stdin so the child releases and exits; asserts it succeeded.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.wait();
        assert!(status.success(), "child failed: {status}");
    }
}

impl Drop for ReExecChild {
    fn drop(&mut self) {
        // Both fail harmlessly if the child is already reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
