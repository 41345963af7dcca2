//! From rows to series: per scope (`command`, `survivors`, `pid:<PID>`,
//! `target`) and metric, one point per run or per sample; and per process.

pub mod build;
pub mod sites;
pub mod thin;

pub use build::{Builder, HeapProcess, Induced, ProcessLife, Samples, from_rows};

use crate::store::{Row, Scope};
use crate::units::{format_bytes, format_signed_bytes};
use serde::{Deserialize, Serialize};

/// The metrics of the summary.json contract, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    // A runtime's own heap (scopes whose processes publish one: see
    // `sample::heap`): judged first where present.
    HeapLiveBytes,
    HeapUsedBytes,
    HeapMaxBytes,
    /// Of the live heap, what a JVM's old generation grew by since it last gave back
    /// (`sample::heap::jvm`): the live heap's fit is bounded by it, not judged itself.
    HeapPromotedBytes,
    RssBytes,
    PssBytes,
    UssBytes,
    SharedBytes,
    PrivateDirtyBytes,
    AnonBytes,
    FileBytes,
    ShmemBytes,
    SwapBytes,
    Fds,
    Threads,
    // A cgroup's own accounting (scope `cgroup` only): what its memory
    // controller charges, including kernel memory no process' RSS shows.
    UsageBytes,
    KernelBytes,
    SockBytes,
    SlabReclaimableBytes,
    SlabUnreclaimableBytes,
    KernelStackBytes,
    PageTablesBytes,
    // A gauge the process exports (`--metric NAME`): a count, or a size
    // when its name ends in `_bytes`.
    Gauge,
    GaugeBytes,
}

impl Metric {
    pub const ALL: [Metric; 24] = [
        Metric::HeapLiveBytes,
        Metric::HeapUsedBytes,
        Metric::HeapMaxBytes,
        Metric::HeapPromotedBytes,
        Metric::RssBytes,
        Metric::PssBytes,
        Metric::UssBytes,
        Metric::SharedBytes,
        Metric::PrivateDirtyBytes,
        Metric::AnonBytes,
        Metric::FileBytes,
        Metric::ShmemBytes,
        Metric::SwapBytes,
        Metric::Fds,
        Metric::Threads,
        Metric::UsageBytes,
        Metric::KernelBytes,
        Metric::SockBytes,
        Metric::SlabReclaimableBytes,
        Metric::SlabUnreclaimableBytes,
        Metric::KernelStackBytes,
        Metric::PageTablesBytes,
        Metric::Gauge,
        Metric::GaugeBytes,
    ];

    /// Kernel memory a cgroup is charged for: judged beside the primary
    /// metric (a socket or dentry leak grows none of the RSS kinds).
    pub const KERNEL: [Metric; 6] = [
        Metric::KernelBytes,
        Metric::SockBytes,
        Metric::SlabReclaimableBytes,
        Metric::SlabUnreclaimableBytes,
        Metric::KernelStackBytes,
        Metric::PageTablesBytes,
    ];

    /// A runtime's own heap, from a `heap` row, not from /proc.
    pub const HEAP: [Metric; 4] = [
        Metric::HeapLiveBytes,
        Metric::HeapUsedBytes,
        Metric::HeapMaxBytes,
        Metric::HeapPromotedBytes,
    ];

    pub fn is_heap(self) -> bool {
        Metric::HEAP.contains(&self)
    }

    /// What a process says of itself, from its `heap` row (its runtime's
    /// heap, its `--metric` gauge), not from /proc: summed over the
    /// processes that have such a row.
    pub const OWN: [Metric; 6] = [
        Metric::HeapLiveBytes,
        Metric::HeapUsedBytes,
        Metric::HeapMaxBytes,
        Metric::HeapPromotedBytes,
        Metric::Gauge,
        Metric::GaugeBytes,
    ];

    pub fn is_own(self) -> bool {
        Metric::OWN.contains(&self)
    }

    /// Judged beside a scope's primary metric for the overall verdict:
    /// shmem, fds, threads, a `--metric` gauge (followed because it was
    /// asked for) and a cgroup's kernel memory.
    pub fn judged_beside_primary(self) -> bool {
        matches!(
            self,
            Metric::ShmemBytes | Metric::Fds | Metric::Threads | Metric::Gauge | Metric::GaugeBytes
        ) || Metric::KERNEL.contains(&self)
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::HeapLiveBytes => "heap_live_bytes",
            Metric::HeapUsedBytes => "heap_used_bytes",
            Metric::HeapMaxBytes => "heap_max_bytes",
            Metric::HeapPromotedBytes => "heap_promoted_bytes",
            Metric::RssBytes => "rss_bytes",
            Metric::PssBytes => "pss_bytes",
            Metric::UssBytes => "uss_bytes",
            Metric::SharedBytes => "shared_bytes",
            Metric::PrivateDirtyBytes => "private_dirty_bytes",
            Metric::AnonBytes => "anon_bytes",
            Metric::FileBytes => "file_bytes",
            Metric::ShmemBytes => "shmem_bytes",
            Metric::SwapBytes => "swap_bytes",
            Metric::Fds => "fds",
            Metric::Threads => "threads",
            Metric::UsageBytes => "usage_bytes",
            Metric::KernelBytes => "kernel_bytes",
            Metric::SockBytes => "sock_bytes",
            Metric::SlabReclaimableBytes => "slab_reclaimable_bytes",
            Metric::SlabUnreclaimableBytes => "slab_unreclaimable_bytes",
            Metric::KernelStackBytes => "kernel_stack_bytes",
            Metric::PageTablesBytes => "pagetables_bytes",
            Metric::Gauge => "gauge",
            Metric::GaugeBytes => "gauge_bytes",
        }
    }

    /// Short label for humans: `RSS`, `PSS`, `fds`.
    pub fn label(self) -> &'static str {
        match self {
            Metric::HeapLiveBytes => "heap live",
            Metric::HeapUsedBytes => "heap used",
            Metric::HeapMaxBytes => "heap max",
            Metric::HeapPromotedBytes => "heap promoted",
            Metric::RssBytes => "RSS",
            Metric::PssBytes => "PSS",
            Metric::UssBytes => "USS",
            Metric::SharedBytes => "shared",
            Metric::PrivateDirtyBytes => "private dirty",
            Metric::AnonBytes => "anon",
            Metric::FileBytes => "file",
            Metric::ShmemBytes => "shmem",
            Metric::SwapBytes => "swap",
            Metric::Fds => "fds",
            Metric::Threads => "threads",
            Metric::UsageBytes => "usage",
            Metric::KernelBytes => "kernel",
            Metric::SockBytes => "sock",
            Metric::SlabReclaimableBytes => "slab reclaimable",
            Metric::SlabUnreclaimableBytes => "slab unreclaimable",
            Metric::KernelStackBytes => "kernel stack",
            Metric::PageTablesBytes => "page tables",
            Metric::Gauge | Metric::GaugeBytes => "gauge",
        }
    }

    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    pub fn is_bytes(self) -> bool {
        !matches!(self, Metric::Fds | Metric::Threads | Metric::Gauge)
    }
}

/// The column of each metric in a row, written once: `Metric::value` reads
/// it, `Row::set` writes it.
macro_rules! metric_columns {
    ($($metric:ident => $column:ident),* $(,)?) => {
        impl Metric {
            /// The metric's value in `row` (`None` where the row has none).
            pub fn value(self, row: &Row) -> Option<u64> {
                match self {
                    $(Metric::$metric => row.$column,)*
                }
            }
        }

        impl Row {
            /// Puts `value` in the column of `metric`.
            pub fn set(&mut self, metric: Metric, value: u64) {
                match metric {
                    $(Metric::$metric => self.$column = Some(value),)*
                }
            }
        }
    };
}

metric_columns! {
    HeapLiveBytes => heap_live_bytes,
    HeapUsedBytes => heap_used_bytes,
    HeapMaxBytes => heap_max_bytes,
    HeapPromotedBytes => heap_promoted_bytes,
    RssBytes => rss_bytes,
    PssBytes => pss_bytes,
    UssBytes => uss_bytes,
    SharedBytes => shared_bytes,
    PrivateDirtyBytes => private_dirty_bytes,
    AnonBytes => anon_bytes,
    FileBytes => file_bytes,
    ShmemBytes => shmem_bytes,
    SwapBytes => swap_bytes,
    Fds => fds,
    Threads => threads,
    UsageBytes => usage_bytes,
    KernelBytes => kernel_bytes,
    SockBytes => sock_bytes,
    SlabReclaimableBytes => slab_reclaimable_bytes,
    SlabUnreclaimableBytes => slab_unreclaimable_bytes,
    KernelStackBytes => kernel_stack_bytes,
    PageTablesBytes => pagetables_bytes,
    Gauge => gauge,
    GaugeBytes => gauge_bytes,
}

/// What the x axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XAxis {
    Run,
    Seconds,
}

impl XAxis {
    pub fn name(self) -> &'static str {
        match self {
            XAxis::Run => "run",
            XAxis::Seconds => "seconds",
        }
    }

    pub fn from_name(name: &str) -> Option<XAxis> {
        [XAxis::Run, XAxis::Seconds]
            .into_iter()
            .find(|x| x.name() == name)
    }

    /// The unit people read rates in: per run, or per hour over time.
    pub fn rate_unit(self) -> &'static str {
        match self {
            XAxis::Run => "run",
            XAxis::Seconds => "h",
        }
    }

    /// x units in one rate unit: 1 run, or 3,600 seconds.
    pub fn per_rate_unit(self) -> f64 {
        match self {
            XAxis::Run => 1.0,
            XAxis::Seconds => 3600.0,
        }
    }

    /// A per-x value in the rate unit: `+4.00 MiB/run`, `-1.20 KiB/h`, `+0.500/h` (counts
    /// with three significant digits, as reasons give them).
    pub fn format_rate(self, per_x: f64, bytes: bool) -> String {
        let v = per_x * self.per_rate_unit();
        let unit = self.rate_unit();
        if bytes {
            format!("{}/{unit}", format_signed_bytes(v))
        } else {
            format!("{}/{unit}", crate::units::format_signed_sig3(v))
        }
    }

    /// A limit in the rate unit, without a sign: `1.00 MiB/run`, `0.500/h`.
    pub fn format_limit(self, per_x: f64, bytes: bool) -> String {
        let v = per_x * self.per_rate_unit();
        let unit = self.rate_unit();
        if bytes {
            format!("{}/{unit}", format_bytes(v))
        } else {
            format!("{}/{unit}", crate::units::format_sig3(v))
        }
    }

    /// A growth in % per x, in the rate unit: `3.70%/run`, `0.41%/h`.
    pub fn format_pct(self, pct_per_x: f64) -> String {
        format!(
            "{}%/{}",
            crate::units::format_sig3(pct_per_x * self.per_rate_unit()),
            self.rate_unit()
        )
    }

    /// What a point is: `runs` or `samples`.
    pub fn points_name(self) -> &'static str {
        match self {
            XAxis::Run => "runs",
            XAxis::Seconds => "samples",
        }
    }
}

/// One series: a scope's metric, summed over its processes, per x.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub scope: Scope,
    pub metric: Metric,
    pub x_axis: XAxis,
    /// (x, y) in x order; y in the metric's unit.
    pub points: Vec<(f64, f64)>,
    /// Largest number of processes summed into one point.
    pub processes: usize,
    /// Points (runs or samples) the series had before long ones were
    /// averaged into buckets (`points` then holds fewer).
    pub count: u64,
}

impl Series {
    pub fn ys(&self) -> Vec<f64> {
        self.points.iter().map(|p| p.1).collect()
    }
}

/// One run of the command, from the event rows.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub run: u32,
    pub pid: u32,
    pub exit_code: Option<i32>,
    /// `exit:N`, `signal:N`, `timeout:DUR` when it ran past `--timeout`, or
    /// `interrupted` when leakwatch was stopped mid-run.
    pub status: String,
    pub duration_s: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    /// When the run was over before its peak could be read: the most it can
    /// have been (the kernel's ru_maxrss, which includes leakwatch's own).
    pub peak_bound_bytes: Option<u64>,
}

impl RunRecord {
    /// Exited non-zero or was killed; a run cut short by Ctrl-C is not
    /// counted as failed.
    pub fn failed(&self) -> bool {
        self.exit_code != Some(0) && self.status != "interrupted"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::store::Tier;

    fn deep(sample: u64, run: u32, scope: Scope, pid: u32, rss: u64) -> Row {
        Row {
            sample,
            run: Some(run),
            pid,
            tier: Tier::Deep,
            rss_bytes: Some(rss),
            pss_bytes: Some(rss),
            ..Row::new(scope)
        }
    }

    #[test]
    fn run_series_sum_processes_and_keep_the_last_sample_of_a_run() {
        let rows = vec![
            deep(0, 1, Scope::Survivors, 10, 100),
            deep(0, 1, Scope::Survivors, 11, 50),
            deep(1, 2, Scope::Survivors, 10, 300),
            deep(2, 2, Scope::Survivors, 10, 200),
        ];
        let s = from_rows(rows).series;
        let rss = s
            .iter()
            .find(|s| s.metric == Metric::RssBytes)
            .expect("rss series");
        assert_eq!(rss.points, vec![(1.0, 150.0), (2.0, 200.0)]);
        assert_eq!(rss.processes, 2);
        assert!(!s.iter().any(|s| s.metric == Metric::UssBytes));
    }

    #[test]
    fn command_series_is_the_peak_of_the_run() {
        let mut a = deep(0, 1, Scope::Command, 10, 100);
        a.tier = Tier::Cheap;
        let mut b = deep(1, 1, Scope::Command, 10, 400);
        b.tier = Tier::Cheap;
        let c = deep(2, 1, Scope::Command, 10, 50);
        let s = from_rows([a, b, c]).series;
        assert_eq!(s[0].points, vec![(1.0, 400.0)]);
    }

    /// A command over within a few milliseconds may be read only between its exec and its
    /// loader (one 4 KiB stack page, no file page resident), and its run's peak row was that
    /// read: neither is a size of it (an example's command read 2.6 MiB in nine runs and
    /// 4 KiB in one, which made its series look as if it fell).
    #[test]
    fn a_command_read_only_before_its_loader_has_no_size_that_run() {
        let cheap = |sample, run, pid, rss, file: Option<u64>, event: Option<&str>| Row {
            tier: Tier::Cheap,
            file_bytes: file,
            event: event.map(Into::into),
            ..deep(sample, run, Scope::Command, pid, rss)
        };
        let rows = [
            cheap(0, 1, 10, 4096, Some(0), None),
            cheap(1, 1, 10, 2_600_000, Some(2_000_000), None),
            cheap(2, 1, 10, 2_600_000, None, Some("peak")),
            cheap(3, 2, 11, 4096, Some(0), None),
            cheap(4, 2, 11, 4096, None, Some("peak")),
            cheap(5, 3, 12, 4096, Some(0), None),
            cheap(6, 3, 12, 9_000_000, None, Some("peak")),
        ];
        let s = from_rows(rows).series;
        let rss = s.iter().find(|s| s.metric == Metric::RssBytes).unwrap();
        assert_eq!(rss.points, vec![(1.0, 2_600_000.0), (3.0, 9_000_000.0)]);
    }

    #[test]
    fn a_partial_sample_is_not_a_point() {
        let mut denied = deep(0, 1, Scope::Survivors, 11, 50);
        denied.pss_bytes = None;
        let rows = vec![deep(0, 1, Scope::Survivors, 10, 100), denied];
        let s = from_rows(rows).series;
        assert!(s.iter().any(|s| s.metric == Metric::RssBytes));
        assert!(!s.iter().any(|s| s.metric == Metric::PssBytes));
    }
}
