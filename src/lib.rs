//! leakwatch: is a long-running process leaking, by how much per run or per
//! hour, in which memory and which process?
//!
//! The modules follow the pipeline:
//! `/proc → sample → series → fit → report / plot / gate`.

pub mod cli;
pub mod error;
pub mod options;
pub mod units;

pub mod fit;
pub mod gate;
pub mod plot;
pub mod report;
pub mod sample;
pub mod series;

pub mod app;

pub use fit::Analysis;
