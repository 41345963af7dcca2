//! A runtime's heap and the kernel's view of the same processes, read
//! together into one finding a user can act on: the heap grows (objects the
//! program keeps), the heap is flat while anon grows (memory outside the
//! heap), or both; and, for a heap that grows, when its live part reaches
//! the heap's maximum (the runtime's out-of-memory error).

use serde::{Deserialize, Serialize};

use super::{SeriesFit, Verdict, kernel_primary};
use crate::series::{HeapProcess, Metric, XAxis};
use crate::store::{HeapSource, Scope};

/// What the heap and anon say together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeapFinding {
    /// The live heap leaks: objects the program keeps.
    Managed,
    /// The live heap does not leak, the kernel's primary (anon) does:
    /// memory outside the heap.
    OutsideHeap,
    /// Both leak.
    Both,
    /// Neither leaks, or the heap is undecided (inconclusive): no reading
    /// of where the kernel's growth is.
    Neither,
}

/// One scope's heap reading (summary.json's `heap`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeapReading {
    #[serde(rename = "name")]
    pub scope: Scope,
    /// The processes whose heap was read, and how.
    pub processes: Vec<HeapProcess>,
    pub finding: HeapFinding,
    /// The live heap's rate the verdict rests on, and the kernel primary's,
    /// per x (run or second).
    pub heap_rate: Option<f64>,
    pub kernel_metric: Metric,
    pub kernel_rate: Option<f64>,
    /// Whether the kernel's primary leaks too (false: RSS does not show
    /// the heap's growth, as a pre-touched heap's does not).
    pub kernel_leaks: bool,
    /// The most the heap may grow to (its last `heap_max_bytes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_max_bytes: Option<f64>,
    /// x units (runs or seconds) from the last point until the live heap
    /// reaches its maximum at its rate: the runtime's out-of-memory error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_to_max: Option<f64>,
    pub x: XAxis,
}

impl HeapReading {
    /// The runtimes the heap was read from (`JVM`, `V8`), each once.
    pub fn sources(&self) -> Vec<HeapSource> {
        let mut s: Vec<HeapSource> = self.processes.iter().map(|p| p.source).collect();
        s.sort();
        s.dedup();
        s
    }
}

/// The heap reading of each scope with a live-heap series.
pub fn read(fits: &[SeriesFit], processes: &[HeapProcess]) -> Vec<HeapReading> {
    fits.iter()
        .filter(|f| f.metric == Metric::HeapLiveBytes)
        .map(|heap| {
            let scope = heap.scope;
            let kernel_metric = kernel_primary(fits, scope);
            let kernel = fits
                .iter()
                .find(|f| f.scope == scope && f.metric == kernel_metric);
            let leaks = |f: Option<&SeriesFit>| f.is_some_and(|f| f.verdict == Verdict::Leak);
            let (heap_leaks, kernel_leaks) = (leaks(Some(heap)), leaks(kernel));
            // Outside the heap only when the heap was judged not to leak:
            // an undecided heap (too few collections) says nothing of where.
            let heap_judged = matches!(heap.verdict, Verdict::Stable | Verdict::Plateau);
            let finding = match (heap_leaks, kernel_leaks) {
                (true, true) => HeapFinding::Both,
                (true, false) => HeapFinding::Managed,
                (false, true) if heap_judged => HeapFinding::OutsideHeap,
                (false, _) => HeapFinding::Neither,
            };
            let heap_rate = heap.judged_rate().0;
            let heap_max_bytes = fits
                .iter()
                .find(|f| f.scope == scope && f.metric == Metric::HeapMaxBytes && f.n > 0)
                .map(|f| f.last);
            let x_to_max = heap_max_bytes
                .zip(heap_rate)
                .filter(|&(max, rate)| heap_leaks && rate > 0.0 && max > 0.0)
                .map(|(max, rate)| ((max - heap.last) / rate).max(0.0));
            HeapReading {
                scope,
                processes: processes
                    .iter()
                    .filter(|p| p.scope == scope)
                    .cloned()
                    .collect(),
                finding,
                heap_rate,
                kernel_metric,
                kernel_rate: kernel.and_then(|k| k.judged_rate().0),
                kernel_leaks,
                heap_max_bytes,
                x_to_max,
                x: heap.x,
            }
        })
        .collect()
}
