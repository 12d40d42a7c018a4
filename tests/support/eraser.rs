//! The late-output attack shared by the backends' tests: a background process
//! that outlives its command writes, then tries every way to take back what
//! it wrote through its descriptors; the command itself truncates its stdout
//! after writing. Nothing written may be lost.

use std::path::Path;

use workspace_core::boundary::CommandSpec;

use super::command;

/// Python run by the erasing background process: waits for `/tmp/go`, writes,
/// then tries every way to take back what it wrote through its descriptors
/// (truncate, seek and overwrite, write at an offset, clear `O_APPEND` and
/// write again), writes once more, and says how each attempt ended in
/// `/tmp/done`.
pub const ERASER: &str = r#"
import errno, fcntl, os, time
while not os.path.exists('/tmp/go'):
    time.sleep(0.02)
os.write(1, b'late kept\n')
os.write(2, b'late err kept\n')
def clear_append(fd):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_APPEND)
attempts = [
    ('ftruncate', lambda: os.ftruncate(1, 0)),
    ('ftruncate-stderr', lambda: os.ftruncate(2, 0)),
    ('lseek', lambda: os.lseek(1, 0, os.SEEK_SET)),
    ('pwrite', lambda: os.pwrite(1, b'XXXX', 0)),
    ('clear-append', lambda: clear_append(1)),
    ('ftruncate-again', lambda: os.ftruncate(1, 0)),
]
said = []
for name, attempt in attempts:
    try:
        attempt()
        said.append(name + ':done')
    except OSError as e:
        said.append(name + ':' + errno.errorcode[e.errno])
os.write(1, b'after\n')
with open('/tmp/done.part', 'w') as f:
    f.write(' '.join(said))
os.rename('/tmp/done.part', '/tmp/done')
"#;

/// Python run by the command itself: writes, then truncates its own stdout.
pub const FOREGROUND: &str = "import os
os.write(1, b'early\\n')
try:
    os.ftruncate(1, 0)
except OSError:
    pass
";

/// Fails at once unless `python3` is installed.
pub fn require_python() {
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "this test needs python3 (Debian package python3)"
    );
}

/// The first command: the eraser in the background, then the command itself
/// writes and truncates its own stdout; each python carries `mark` in its argv.
pub fn first_command(mark: &str) -> CommandSpec {
    command(
        &[
            "/bin/sh",
            "-c",
            "python3 -c \"$1\" \"$0\" & python3 -c \"$2\" \"$0\"",
            mark,
            ERASER,
            FOREGROUND,
        ],
        Some(60_000),
    )
}

/// The second command: lets the eraser go, waits until it is done and prints
/// how each attempt ended.
pub fn second_command(mark: &str) -> CommandSpec {
    command(
        &[
            "/bin/sh",
            "-c",
            ": > /tmp/go; while [ ! -e /tmp/done ]; do sleep 0.02; done; cat /tmp/done",
            mark,
        ],
        Some(60_000),
    )
}

/// Every byte the eraser and the command wrote is in the evidence bundle
/// `evidence` (its files and `outcome.json`), and each attempt failed on the
/// pipe or changed nothing.
pub fn assert_nothing_erased(evidence: &Path) {
    let read = |name: &str| std::fs::read_to_string(evidence.join(name)).unwrap();
    let attempts = read("commands/0002/stdout");
    for expected in [
        "ftruncate:EINVAL",
        "ftruncate-stderr:EINVAL",
        "lseek:ESPIPE",
        "pwrite:ESPIPE",
        "ftruncate-again:EINVAL",
    ] {
        assert!(attempts.contains(expected), "{expected} in {attempts}");
    }
    assert_eq!(read("commands/0001/stdout"), "early\n");
    assert_eq!(read("commands/0001/late.stdout"), "late kept\nafter\n");
    assert_eq!(read("commands/0001/late.stderr"), "late err kept\n");
    let outcome: serde_json::Value = serde_json::from_str(&read("outcome.json")).unwrap();
    let late = &outcome["late_output"];
    assert_eq!(
        late,
        &serde_json::json!([{"seq": 1, "stdout_bytes": 16, "stderr_bytes": 14}]),
        "{outcome:#}"
    );
}
