//! The command line as clap sees it: flags and help text, no logic.
//! `options.rs` turns this into validated options.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "leakwatch",
    version,
    // `leakwatch attach -V` prints the version too, as the man pages list it.
    propagate_version = true,
    about = "Find memory leaks in long-running Linux processes",
    long_about = "Find memory leaks in long-running Linux processes.\n\n\
        leakwatch samples a process tree from /proc (RSS, PSS, USS, anon/file/shmem, fds, \
        threads), fits the growth per run or per hour, and says whether it is a leak, \
        a plateau or stable.\n\n\
        Exit status: 0 no leak (stable, plateau, inconclusive) or the gate passed; \
        1 a leak verdict when no gate is given, or the gate (--max-growth, --max-peak, \
        `check`) failed; 2 usage or runtime error, or every run of the command failed; \
        128+N when stopped by signal N: \
        130 Ctrl-C, 129 SIGHUP (a dropped ssh session), 131 SIGQUIT, 143 SIGTERM. \
        --exit-zero (run, attach, report, analyze) gives 0 for a leak or a failed gate \
        (reports only). A gate check whose interval contains its limit is undecided: \
        it passes unless --undecided fail.\n\n\
        Sizes (--max-growth, --max-peak, --limit, --budget) take any case: k, m, g, t and \
        KiB, MiB, GiB, TiB are binary (1024), kB, MB, GB, TB are SI (1000): 10m = 10MiB = \
        10485760 bytes, 10mb = 10MB = 10000000 bytes; the gate prints the limit it read. Whatever stops it, the processes leakwatch started are \
        stopped and the reports of the samples so far are written first.",
    after_help = "Examples:\n  \
        leakwatch run --repeat 10 -- ./pants filter ::\n  \
        leakwatch run --repeat 10 --watch 4242 -- ./client --ping\n  \
        leakwatch attach 4242 --duration 30m\n  \
        leakwatch attach --cgroup /sys/fs/cgroup/memory/myapp --serve 127.0.0.1:9464\n  \
        leakwatch analyze --prometheus http://prom:9090 --query 'process_resident_memory_bytes' --range 7d\n  \
        leakwatch report reports/2026-11-29T18-40-00/"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command repeatedly; follow the daemons it leaves behind and the
    /// processes you --watch (a local server the runs connect to is named
    /// with the --watch to add), one deep sample after each run.
    #[command(after_help = "Examples:\n  \
        leakwatch run --repeat 10 -- ./pants filter ::\n  \
        leakwatch run --repeat 20 --watch 4242 -- ./client --ping    (a server the runs talk to)\n  \
        leakwatch run --repeat 20 --max-growth 512KiB/run -- ./job    (a CI gate: exit 1 above it)\n  \
        leakwatch run --repeat 10 --py-sites -- python3 worker.py    (which Python lines keep it)")]
    Run(RunArgs),
    /// Sample a running process and its descendants over time.
    #[command(
        after_help = "Without --duration it samples until the target exits or Ctrl-C \
        (the reports of the samples so far are written either way).\n\n\
        Examples:\n  \
        leakwatch attach 4242 --duration 10m\n  \
        leakwatch attach --name 'celery.*worker' --all --duration 1h --max-growth 20MiB/h\n  \
        leakwatch attach 4242 --py-sites --duration 5m    (Python lines and types, no restart)\n  \
        leakwatch attach 4242 --native-sites --duration 5m    (C/C++/Rust stacks)\n  \
        leakwatch attach --cgroup /sys/fs/cgroup/memory/myapp --serve 127.0.0.1:9464"
    )]
    Attach(AttachArgs),
    /// Rebuild summary.json, reports and plots from a samples.csv (a CI
    /// artifact, a colleague's run), with other analysis or gate options.
    Report(ReportArgs),
    /// Compare a fresh run's summary.json against a committed baseline; exit 1
    /// on a significant regression.
    Check(CheckArgs),
    /// Judge series pulled from Prometheus (one per label set: a pod, a
    /// container, a process group) with the same fits, reports and gate.
    Analyze(AnalyzeArgs),
    /// Write a finished run as OpenMetrics text (node-exporter's textfile
    /// collector), the same metrics `attach --serve` serves.
    Export(ExportArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the man page (roff), or write one per subcommand into a directory.
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// How many times to run the command.
    #[arg(short = 'n', long, default_value_t = 10, value_name = "N")]
    pub repeat: u64,

    /// Also sample this already-running process (with its descendants) after
    /// each run; repeat for several.
    #[arg(short, long, value_name = "PID")]
    pub watch: Vec<String>,

    /// How often to poll the command's tree for its peak while it runs.
    #[arg(
        hide_short_help = true,
        long,
        default_value = "50ms",
        value_name = "DUR"
    )]
    pub interval: String,

    /// How long to wait after the command exits before the deep sample, so a
    /// daemon can finish the work the command handed it.
    #[arg(
        hide_short_help = true,
        long,
        default_value = "500ms",
        value_name = "DUR",
        allow_hyphen_values = true
    )]
    pub settle: String,

    /// Stop a run that takes longer than this (TERM, then KILL after 3s); it
    /// is recorded as failed (timeout) and the session goes on.
    #[arg(hide_short_help = true, long, value_name = "DUR")]
    pub timeout: Option<String>,

    /// Find the Python lines whose memory grows run after run: every
    /// Python process the command starts (daemons it detaches, workers they
    /// fork) runs tracemalloc through a bootstrap sitecustomize, and a
    /// --watch'ed one gets it through gdb (as attach --py-sites); each is
    /// asked for its allocation sites and its live objects by type after
    /// each run. Slows allocation-heavy Python code (2–6× at one frame).
    #[arg(long)]
    pub py_sites: bool,

    /// Frames recorded per allocation with --py-sites (more frames show the
    /// callers, and cost much more on Python 3.11+).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "N",
        requires = "py_sites",
        default_value_t = 1
    )]
    pub py_frames: usize,

    /// Find the C, C++ and Rust call stacks whose memory grows run after
    /// run: the command runs with leakwatch's sampling allocator shim
    /// preloaded (libleakwatch_shim.so, built into leakwatch), which
    /// every process it starts inherits; after each run each process
    /// reports its live sampled bytes by stack and leakwatch names them.
    #[arg(long)]
    pub native_sites: bool,

    /// Mean bytes allocated between two samples with --native-sites
    /// (smaller: more accurate, slower; 512KiB costs an allocation-bound
    /// loop about half as much and finds small leaks less often:
    /// docs/performance.md#the-allocator-shim).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "SIZE",
        requires = "native_sites",
        default_value = "64KiB"
    )]
    pub native_interval: String,

    /// Find the JavaScript functions whose memory grows run after run:
    /// every Node process the command starts runs V8's sampling heap
    /// profiler from its start (through leakwatch's preload: no port) and
    /// reports its live sampled bytes by function after each run (a
    /// --watch'ed one through its inspector, with --node-inspector).
    #[arg(long)]
    pub js_sites: bool,

    /// Mean bytes allocated between two samples with --js-sites (smaller:
    /// more accurate, slower: 1.05x at 256KiB, 1.8x at 32KiB on an
    /// allocation-heavy loop).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "SIZE",
        requires = "js_sites",
        default_value = "256KiB"
    )]
    pub js_interval: String,

    /// Leave the processes the command left behind running at the end
    /// (by default they get TERM, then KILL after 3s).
    #[arg(hide_short_help = true, long)]
    pub keep_survivors: bool,

    /// Do not load leakwatch's heap reader into the Node processes the
    /// command starts (by default each gets it through NODE_OPTIONS, and
    /// after each run collects its garbage and gives V8's live heap).
    #[arg(hide_short_help = true, long, help_heading = "Runtime heaps")]
    pub no_node_preload: bool,

    #[command(flatten)]
    pub heaps: HeapArgs,

    #[command(flatten)]
    pub analysis: AnalysisArgs,

    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    /// The command and its arguments, run directly (no shell).
    #[arg(
        required = true,
        last = true,
        value_name = "CMD",
        help_heading = "Arguments"
    )]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The process to sample; its descendants are followed as they come and
    /// go. Or name the target with -p/--pid, --name, --cgroup or --unit.
    #[arg(
        value_name = "PID",
        conflicts_with_all = ["pid_flag", "name", "cgroup", "unit"]
    )]
    pub pid: Option<String>,

    /// The process to sample, as psrecord, py-spy and heaptrack take it.
    #[arg(
        short = 'p',
        long = "pid",
        id = "pid_flag",
        value_name = "PID",
        conflicts_with_all = ["name", "cgroup", "unit"],
        help_heading = "Target (instead of PID)"
    )]
    pub pid_flag: Option<String>,

    #[command(flatten)]
    pub targets: TargetArgs,

    /// Time between samples, on average: each wait is drawn within ±30% of
    /// it, so a workload that cycles with the same period cannot alias.
    #[arg(
        hide_short_help = true,
        long,
        default_value = "1s",
        value_name = "DUR",
        help_heading = "Sampling"
    )]
    pub interval: String,

    /// Stop after this long: 90s, 10m, 2h (a bare number is seconds; default:
    /// when the target exits or on Ctrl-C).
    #[arg(
        long,
        value_name = "DUR",
        allow_hyphen_values = true,
        help_heading = "Sampling"
    )]
    pub duration: Option<String>,

    /// Largest fraction of wall time spent walking the target's page tables
    /// for PSS/USS (each walk holds the process's mmap lock while it runs),
    /// over the whole tree; 0: cheap tier only, no walk at all (no PSS/USS,
    /// no mappings, no stall).
    #[arg(
        hide_short_help = true,
        long,
        default_value = "0.1%",
        value_name = "PERCENT",
        help_heading = "Sampling"
    )]
    pub deep_budget: String,

    /// Find the C, C++ and Rust call stacks whose memory grows while
    /// attached: gdb loads leakwatch's sampling allocator shim into the
    /// process (as `heaptrack -p` does) and it redirects the allocation
    /// functions of every loaded object; growth counts from the attach.
    /// One PID only (not --name, --cgroup or --unit); needs gdb and ptrace
    /// permission (the process' user or root).
    #[arg(long, help_heading = "Sampling")]
    pub native_sites: bool,

    /// Find the Python lines and types whose memory grows while attached,
    /// without a restart: gdb has one of the process' threads run
    /// leakwatch's bootstrap (tracemalloc from the attach on, live objects
    /// by type), and the Python processes below it too; growth counts from
    /// the attach, and the process stops tracing at the end. One PID only;
    /// needs gdb and ptrace permission (the process' user or root).
    #[arg(long, help_heading = "Sampling")]
    pub py_sites: bool,

    /// Frames recorded per allocation with --py-sites (more frames show the
    /// callers, and cost much more on Python 3.11+).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "N",
        requires = "py_sites",
        default_value_t = 1,
        help_heading = "Sampling"
    )]
    pub py_frames: usize,

    /// Mean bytes allocated between two samples with --native-sites
    /// (smaller: more accurate, slower; 512KiB costs an allocation-bound
    /// loop about half as much and finds small leaks less often:
    /// docs/performance.md#the-allocator-shim).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "SIZE",
        requires = "native_sites",
        default_value = "64KiB",
        help_heading = "Sampling"
    )]
    pub native_interval: String,

    /// Find the JavaScript functions whose memory grows while attached
    /// (with --node-inspector): V8's sampling heap profiler runs from the
    /// attach and is read after each full collection; growth counts from the
    /// attach.
    #[arg(long, requires = "node_inspector", help_heading = "Sampling")]
    pub js_sites: bool,

    /// Mean bytes allocated between two samples with --js-sites.
    #[arg(
        hide_short_help = true,
        long,
        value_name = "SIZE",
        requires = "js_sites",
        default_value = "256KiB",
        help_heading = "Sampling"
    )]
    pub js_interval: String,

    /// Hold samples.csv to this many rows: when it fills, every other older
    /// cheap sample is dropped (first, last and deep samples kept) and
    /// sampling slows to half the rate, so the series stays even.
    #[arg(
        hide_short_help = true,
        long,
        value_name = "ROWS",
        help_heading = "Sampling"
    )]
    pub max_samples: Option<u64>,

    #[command(flatten)]
    pub heaps: HeapArgs,

    #[command(flatten)]
    pub serve: ServeArgs,

    #[command(flatten)]
    pub analysis: AnalysisArgs,

    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Where a followed process's runtime heap is read from, beside the ones
/// read without asking (a JVM's hsperfdata file).
#[derive(Debug, Args)]
pub struct HeapArgs {
    /// Read the heap from the process's own metrics endpoint at each sample
    /// (Prometheus text or Go's expvar JSON: go_memstats_heap_alloc_bytes,
    /// jvm_memory_used_bytes, nodejs_heap_size_used_bytes, memstats…), for
    /// the followed process that listens on its port: one HTTP GET per sample.
    #[arg(long, value_name = "URL", help_heading = "Runtime heaps")]
    pub metrics: Option<String>,

    /// Also follow this gauge of the --metrics endpoint as a series of its
    /// own (a queue's length, a cache's entries; judged beside the heap):
    /// its samples summed over their labels, or a dotted path in expvar
    /// JSON. A name ending in _bytes is a size.
    #[arg(
        hide_short_help = true,
        long,
        value_name = "NAME",
        requires = "metrics",
        help_heading = "Runtime heaps"
    )]
    pub metric: Option<String>,

    /// Read the heap of Node processes leakwatch did not start through
    /// their inspector: SIGUSR1 opens it on 127.0.0.1 (Node prints
    /// "Debugger listening"), V8's heap is read over the DevTools protocol,
    /// with full collections (a pause each: once per run, or within 1% of
    /// the time when attached); closed again at the end.
    #[arg(long, help_heading = "Runtime heaps")]
    pub node_inspector: bool,

    /// Find the Java classes whose instances grow: each JVM followed is
    /// asked for its class histogram (jcmd's GC.class_histogram, through
    /// its attach socket: a full collection, so a pause each time) — once
    /// per run, or within 1% of the time when attached. What the histograms
    /// grow the JVM's own memory by is read around each and allowed for in
    /// the verdicts.
    #[arg(long, help_heading = "Runtime heaps")]
    pub jvm_classes: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// An output directory of leakwatch, or its samples.csv.
    #[arg(value_name = "DIR|samples.csv")]
    pub input: PathBuf,

    /// Where to write the rebuilt outputs (default: the input directory);
    /// samples.csv is copied there, so DIR can be reported again.
    #[arg(short, long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,

    /// Also print summary.json on standard output (the human summary stays
    /// on stderr).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub analysis: AnalysisArgs,

    #[command(flatten)]
    pub gate: GateArgs,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Exit status and CI gate")]
pub struct GateArgs {
    /// Exit 0 even on a leak verdict or a failed gate, for those who only
    /// want the reports (errors still exit 2, signals 128+N). Without it a
    /// leak exits 1 when no gate is given, and the gate decides when one is.
    #[arg(long)]
    pub exit_zero: bool,

    /// Fail when the 95% CI of the rate the verdict rests on lies above this:
    /// '512KiB/run', '20MiB/h', '1%/run', '2%/h', or '40%' in total; pass when
    /// it lies below; undecided in between (see --undecided). Repeatable.
    /// Sizes in any case: k/m/g and KiB/MiB/GiB binary, kB/MB/GB SI.
    #[arg(long, value_name = "RATE", allow_hyphen_values = true)]
    pub max_growth: Vec<String>,

    /// The series to gate, SERIES:METRIC (default: the verdict's own, the
    /// followed processes' anon_bytes, else command:rss_bytes). Repeatable.
    #[arg(long, value_name = "SERIES:METRIC")]
    pub gate_on: Vec<String>,

    /// Fail when a run's peak RSS (the command's tree; attach: the target
    /// tree's largest RSS) exceeds this size.
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub max_peak: Option<String>,

    /// 'ci': judge the rate's 95% CI (default, never flaky); 'slope': the
    /// rate itself (stricter, flakier).
    #[arg(
        hide_short_help = true,
        long,
        default_value = "ci",
        value_name = "RULE"
    )]
    pub gate_rule: String,

    /// What a check whose interval contains the limit does: 'pass' (default:
    /// the data do not show the limit exceeded; it is reported as undecided
    /// with the rerun that would decide it) or 'fail' (strict pipelines).
    #[arg(
        hide_short_help = true,
        long,
        default_value = "pass",
        value_name = "pass|fail"
    )]
    pub undecided: String,

    /// Write the gate's result as JUnit XML (one test case per check).
    #[arg(hide_short_help = true, long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Also write summary.json to FILE, to commit as a baseline for `check`.
    #[arg(hide_short_help = true, long, value_name = "FILE")]
    pub save_baseline: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// An output directory of leakwatch, or its summary.json.
    #[arg(value_name = "DIR|summary.json")]
    pub current: PathBuf,

    /// The committed summary.json to compare against.
    #[arg(long, value_name = "FILE")]
    pub baseline: PathBuf,

    /// Allowed slack over the baseline's growth and peak.
    #[arg(long, default_value = "10%", value_name = "PERCENT")]
    pub tolerance: String,

    /// The series to compare, SERIES:METRIC (default: the ones the baseline
    /// gated, else the followed processes' anon_bytes). Repeatable.
    #[arg(long, value_name = "SERIES:METRIC")]
    pub gate_on: Vec<String>,

    /// Write the result as JUnit XML.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,

    /// Print the result as JSON on standard output (the gate: passed, rule,
    /// checks, violations).
    #[arg(long)]
    pub json: bool,
}

/// Ways to name an `attach` target other than by PID.
#[derive(Debug, Args)]
#[command(next_help_heading = "Target (instead of PID)")]
pub struct TargetArgs {
    /// Processes whose name or command line matches this regular expression
    /// (as `pgrep -f`); more than one match is an error unless --all.
    #[arg(long, value_name = "REGEX", conflicts_with_all = ["cgroup", "unit"])]
    pub name: Option<String>,

    /// With --name: follow every matching process (and its descendants),
    /// matched again at each sample.
    #[arg(long, requires = "name")]
    pub all: bool,

    /// A cgroup: its processes plus its own memory accounting (memory.stat:
    /// page cache, shmem, kernel memory). A directory under /sys/fs/cgroup,
    /// or the path /proc/PID/cgroup shows.
    #[arg(long, value_name = "PATH", conflicts_with = "unit")]
    pub cgroup: Option<PathBuf>,

    /// A systemd unit (e.g. nginx.service), resolved to its cgroup.
    #[arg(long, value_name = "NAME")]
    pub unit: Option<String>,
}

/// `attach --serve`: OpenMetrics for Prometheus while sampling.
#[derive(Debug, Args)]
#[command(next_help_heading = "Prometheus")]
pub struct ServeArgs {
    /// Serve /metrics (OpenMetrics text) on this address while sampling:
    /// '127.0.0.1:9464', ':9464' (loopback), '[::1]:9464'.
    #[arg(long, value_name = "ADDR")]
    pub serve: Option<String>,

    /// Allow --serve on an address other than loopback (the metrics name
    /// processes and their command names).
    #[arg(hide_short_help = true, long, requires = "serve")]
    pub serve_public: bool,

    /// Export at most this many processes (the largest by RSS) per scrape;
    /// series and fits are always exported.
    #[arg(
        hide_short_help = true,
        long,
        default_value_t = 50,
        value_name = "N",
        requires = "serve"
    )]
    pub export_top: usize,
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Prometheus' base URL, e.g. 'http://127.0.0.1:9090'.
    #[arg(long, value_name = "URL")]
    pub prometheus: String,

    /// The PromQL expression: one series per label set is judged, e.g.
    /// 'container_memory_working_set_bytes{namespace="shop",container!=""}'.
    #[arg(long, value_name = "PROMQL")]
    pub query: String,

    /// How far back from --end to look.
    #[arg(long, default_value = "7d", value_name = "DUR")]
    pub range: String,

    /// The end of the range: RFC 3339 or Unix seconds (default: now).
    #[arg(long, value_name = "TIME")]
    pub end: Option<String>,

    /// Resolution (default: the range / 1000, at least 15s). Long ranges are
    /// pulled in chunks under Prometheus' 11,000 points per series.
    #[arg(long, value_name = "DUR")]
    pub step: Option<String>,

    /// What the values are, as a summary.json metric name: 'rss_bytes'
    /// (default; working set, resident memory), 'anon_bytes', 'fds', 'threads' …
    #[arg(long = "as", default_value = "rss_bytes", value_name = "METRIC")]
    pub as_metric: String,

    /// Give up on a request after this long.
    #[arg(long, default_value = "60s", value_name = "DUR")]
    pub timeout: String,

    #[command(flatten)]
    pub analysis: AnalysisArgs,

    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// An output directory of leakwatch, or its samples.csv.
    #[arg(value_name = "DIR|samples.csv")]
    pub input: PathBuf,

    /// The format: 'openmetrics' (also valid Prometheus text for the
    /// textfile collector).
    #[arg(long, default_value = "openmetrics", value_name = "FORMAT")]
    pub format: String,

    /// Write to FILE (atomically, as the textfile collector needs) instead
    /// of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Export at most this many processes (the largest by RSS at the end).
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub export_top: usize,

    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: String,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write leakwatch.1 and leakwatch-<subcommand>.1 into DIR instead of
    /// printing leakwatch.1.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Analysis")]
pub struct AnalysisArgs {
    /// Leading runs (or samples) to leave out as warm-up; default: detect
    /// (at most one, a first step far above the later ones).
    #[arg(hide_short_help = true, long, value_name = "K")]
    pub warmup: Option<usize>,

    /// Project when the main series reaches this size, e.g. '2GiB'.
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub limit: Option<String>,

    /// Advise after how many runs (tasks) a process should be recycled to
    /// stay under this size, e.g. '512MiB'.
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub budget: Option<String>,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Output directory (default: reports/<timestamp>/).
    #[arg(short, long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,

    /// Also print summary.json on standard output (the human summary stays
    /// on stderr).
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
