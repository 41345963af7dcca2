//! The integration tests, one binary (one link instead of one per file):
//! the CLI, run and attach end to end on real fixture processes, verdicts,
//! the CI gate, worker pools, and the report files.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

mod common;
#[path = "../support/own_log.rs"]
mod own_log;

mod attach_e2e;
mod cli;
mod first_use;
mod fleet_cli;
mod gate_e2e;
mod heap_sources;
mod hostile;
mod native_sites;
mod pool_e2e;
mod prometheus_e2e;
mod py_sites;
mod report_output;
mod run_e2e;
mod targets_e2e;
mod verdict_e2e;
