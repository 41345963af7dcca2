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
/// (no-color.org). It governs clap's help and usage errors, and the
/// verdict leakwatch colours on a terminal (`paint`).
pub fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Colours leakwatch uses: one per kind of outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    /// A leak, a failed gate.
    Red,
    /// Inconclusive.
    Yellow,
    /// Stable, plateau, a passed gate.
    Green,
}

/// Whether stderr takes colour: a terminal, and `NO_COLOR` not set.
pub fn colour_on() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && !no_color()
}

/// `text` in bold `colour` (ANSI SGR) when `on`, else as it is.
pub fn paint(text: &str, colour: Colour, on: bool) -> String {
    if !on {
        return text.to_string();
    }
    let code = match colour {
        Colour::Red => 31,
        Colour::Yellow => 33,
        Colour::Green => 32,
    };
    format!("\x1b[1;{code}m{text}\x1b[0m")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paint_wraps_only_when_on() {
        assert_eq!(paint("LEAK", Colour::Red, false), "LEAK");
        assert_eq!(paint("LEAK", Colour::Red, true), "\x1b[1;31mLEAK\x1b[0m");
    }
}
