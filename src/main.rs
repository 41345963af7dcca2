//! The `leakwatch` binary: parse, run, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;
use leakwatch::cli::Cli;
use leakwatch::error::Exit;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match leakwatch::app::run(cli) {
        Ok(exit) => exit.into(),
        Err(err) => {
            leakwatch::console::say_line(&format!("error: {err:#}"));
            Exit::Error.into()
        }
    }
}
