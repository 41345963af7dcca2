//! How a leakwatch session ends, as an exit code (a contract: see `leakwatch --help`).

use std::process::ExitCode;

/// Exit codes: 0 no leak / gate passed, 1 a leak verdict (no gate given) or
/// a gate failed, 2 usage or runtime error (or, no gate given, every run of
/// the command failed), 128 + N when stopped by signal N
/// (130 for Ctrl-C, 129 for a dropped ssh session's SIGHUP, 143 for
/// SIGTERM); the reports of the samples so far are written first. Which
/// outcome of an analysis gives which code is decided in one place,
/// `app::exit_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    /// A `leak` verdict and no gate to judge it (a linter's finding).
    Leak,
    GateFailed,
    Error,
    /// Interrupted by this signal.
    Interrupted(i32),
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Leak | Exit::GateFailed => 1,
            Exit::Error => 2,
            Exit::Interrupted(sig) => u8::try_from(128 + sig.clamp(1, 127)).unwrap_or(130),
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}
