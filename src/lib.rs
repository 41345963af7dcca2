//! leakwatch: is a long-running process leaking, by how much per run or per
//! hour, in which memory and which process?
//!
//! The modules follow the pipeline, each importing only those above it:
//! `/proc → sample → series → fit → gate → report / plot`, with `store`
//! (samples.csv, read by every stage) at the bottom and `app` on top.

pub mod cli;
pub mod console;
pub mod error;
pub mod escape;
pub mod options;
pub mod units;

pub mod output;
pub mod store;

pub mod check;
pub mod fit;
pub mod gate;
pub mod plot;
pub mod report;
pub mod sample;
pub mod series;
pub mod summary;

// Prometheus out (`attach --serve`, `export`).
pub mod openmetrics;
pub mod serve;

pub mod app;

pub use fit::Analysis;
