//! The `leakwatch` binary: parse, run, map the outcome to an exit code.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use leakwatch::cli::Cli;
use leakwatch::error::Exit;
use leakwatch::sample::guardian;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == guardian::SUBCOMMAND) {
        return guardian::main(&args[2..]);
    }
    // NO_COLOR (no-color.org): help and usage errors in plain text.
    let mut command = Cli::command();
    if leakwatch::console::no_color() {
        command = command.color(clap::ColorChoice::Never);
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let matches =
        command.try_get_matches_from(&args).unwrap_or_else(
            |e| match leakwatch::options::usage_hint(&e, &args) {
                Some(hint) => {
                    leakwatch::console::say_line(&format!("error: {hint}"));
                    std::process::exit(Exit::Error.code().into())
                }
                None => e.exit(),
            },
        );
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match leakwatch::app::run(cli) {
        Ok(exit) => exit.into(),
        Err(err) => {
            leakwatch::console::say_line(&format!("error: {err:#}"));
            Exit::Error.into()
        }
    }
}
