//! How a leakwatch session ends, as an exit code (a contract: see `leakwatch --help`).

use std::process::ExitCode;

/// Exit codes: 0 no leak / gate passed, 1 gate failed, 2 usage or runtime
/// error, 128 + N when stopped by signal N (130 for Ctrl-C, 129 for a
/// dropped ssh session's SIGHUP, 143 for SIGTERM); the reports of the
/// samples so far are written first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    GateFailed,
    Error,
    /// Interrupted by this signal.
    Interrupted(i32),
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::GateFailed => 1,
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
