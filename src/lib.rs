//! leakwatch: is a long-running process leaking, by how much per run or per
//! hour, in which memory and which process?
//!
//! The modules are listed in pipeline order, each importing only those
//! listed before it: the helpers every stage uses, `store` (samples.csv,
//! read by every stage), the pipeline `/proc → sample → series → fit →
//! gate → report / plot`, and `app` on top.

// What every stage uses: exit codes,
pub mod error;
// names from outside made inert,
pub mod escape;
// sizes, durations and rates,
pub mod units;
// safe writes,
pub mod output;
// text on stderr.
pub mod console;

// The bottom layer: samples.csv, read by every stage.
pub mod store;

// The pipeline, in order: /proc → rows,
pub mod sample;
// rows → series per scope and metric,
pub mod series;
// series → fits, verdicts, findings,
pub mod fit;
// fits in words: every sentence and figure the outputs say,
pub mod phrase;
// verdicts → the CI gate,
pub mod gate;
// summary.json,
pub mod summary;
// a summary against a baseline (`check`),
pub mod check;
// charts,
pub mod plot;
// every file of a report, and the exporters.
pub mod report;

// On top: the command line,
pub mod cli;
// its validated options,
pub mod options;
// orchestration.
pub mod app;

pub use fit::Analysis;
