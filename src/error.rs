//! How a leakwatch session ends, as an exit code (a contract: see `leakwatch --help`).

use std::process::ExitCode;

/// Exit codes: 0 no leak / gate passed, 1 gate failed, 2 usage or runtime
/// error, 130 interrupted (reports of the samples so far are written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    GateFailed = 1,
    Error = 2,
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}
