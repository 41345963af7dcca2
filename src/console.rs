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

/// Progress on stderr: a bar (run i of N, elapsed, current memory) when
/// stderr is a terminal, plain log lines otherwise, nothing when quiet.
pub struct Progress {
    quiet: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    /// `total` runs for `run`; `None` for `attach` (a spinner with elapsed time).
    pub fn new(quiet: bool, total: Option<u64>) -> Self {
        use std::io::IsTerminal;
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let (bar, template) = match total {
                Some(n) => (
                    indicatif::ProgressBar::new(n),
                    "{spinner} run {pos}/{len} [{bar:30}] {elapsed_precise}  {msg}",
                ),
                None => (
                    indicatif::ProgressBar::new_spinner(),
                    "{spinner} attached {elapsed_precise}  {msg}",
                ),
            };
            if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            bar
        });
        Progress { quiet, bar }
    }

    pub fn is_interactive(&self) -> bool {
        self.bar.is_some()
    }

    /// Neither a bar nor log lines (`--quiet` without a terminal).
    pub fn is_silent(&self) -> bool {
        self.quiet && self.bar.is_none()
    }

    /// A completed step (a run): the bar moves, or a log line is printed.
    pub fn step(&self, pos: u64, text: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(pos);
                bar.set_message(crate::escape::inert(text).into_owned());
            }
            None => self.line(text),
        }
    }

    /// The bar's message only (no log line): per-tick status in attach mode.
    pub fn status(&self, text: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(crate::escape::inert(text).into_owned());
        }
    }

    /// A line that stays: above the bar, or on its own.
    pub fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("leakwatch: {}", crate::escape::inert_lines(text))),
            None if !self.quiet => say_line(&format!("leakwatch: {text}")),
            None => {}
        }
    }

    /// Removes the bar before the summary is printed.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
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
