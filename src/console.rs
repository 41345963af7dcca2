//! Text for people on stderr. A closed pipe (`leakwatch … 2>&1 | head -1`)
//! or a terminal gone with a dropped ssh session is not leakwatch's error:
//! writes that fail are dropped, never a panic, and never a reason to skip
//! the reports.

use std::io::Write;

/// Writes `text` to stderr, control characters escaped but its newlines
/// and colours (it may quote a name a process chose, or a command line); a
/// write that fails is ignored.
pub fn say(text: &str) {
    let text = crate::escape::inert_terminal(text);
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Writes `text` and a newline to stderr as `say` does; a write that fails
/// is ignored.
pub fn say_line(text: &str) {
    let text = crate::escape::inert_terminal(text);
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.write_all(b"\n");
}

/// Whether colour is off: `NO_COLOR` set to anything but the empty string
/// (no-color.org). leakwatch's own output is plain text; this governs
/// clap's help and usage errors.
pub fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}
