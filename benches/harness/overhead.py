#!/usr/bin/env python3
"""What leakwatch costs the machine and the target, whole-process, against
the kernel's floor measured in the same run and against what people run
instead (psutil, psrecord, smem).

Installs psutil and psrecord from PyPI into a venv under target/ and smem
from apt when missing; builds benches/harness/mmap_loop.c and
benches/harness/proc_floor.c with cc and leakwatch with cargo (release).
Starts the trees it measures (a Python master forking sleepers, which die
with it) and stops everything it started, whatever happens.

  python3 benches/harness/overhead.py              # the figures of README's table
  python3 benches/harness/overhead.py --long       # the 100-process attach for 10 min
  python3 benches/harness/overhead.py --only interference   (or: compare, goals)

Every CPU figure is user + system time from wait4(2) (whole process) or
CLOCK_PROCESS_CPUTIME_ID (the floor). A tool's cost per sample is marginal:
two runs of different lengths, the CPU difference over the sample difference,
so start-up and report writing cancel out.
"""

import argparse
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = os.path.join(ROOT, "target")
BIN = os.path.join(TARGET, "bench-bin")
VENV = os.path.join(TARGET, "bench-venv")
LEAKWATCH = os.path.join(TARGET, "release", "leakwatch")
STARTED = []  # Popen objects to kill at exit

FORKER = r"""
import ctypes, os, signal, sys
libc = ctypes.CDLL(None)
libc.prctl(1, signal.SIGKILL)
n = int(sys.argv[1])
x = b"\x01" * (int(sys.argv[2]) << 20)  # resident, shared with the forks
for _ in range(n - 1):
    if os.fork() == 0:
        libc.prctl(1, signal.SIGKILL)
        while True:
            signal.pause()
print("ready", os.getpid(), flush=True)
while True:
    signal.pause()
"""


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cleanup():
    for p in STARTED:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.wait(timeout=5)
        except Exception:
            pass


def setup():
    os.makedirs(BIN, exist_ok=True)
    for src in ("mmap_loop", "proc_floor"):
        subprocess.run(["cc", "-O2", "-o", os.path.join(BIN, src),
                        os.path.join(ROOT, "benches", "harness", src + ".c")], check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    if not os.path.exists(os.path.join(VENV, "bin", "psrecord")):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "-q", "psutil", "psrecord"],
                       check=True)
    if not shutil.which("smem"):
        subprocess.run(["apt-get", "install", "-y", "-q", "smem"], check=True)
    versions = subprocess.run([os.path.join(VENV, "bin", "pip"), "list"], capture_output=True,
                              text=True).stdout
    return {
        "psutil": re.search(r"psutil\s+(\S+)", versions).group(1),
        "psrecord": re.search(r"psrecord\s+(\S+)", versions).group(1),
        "smem": subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "smem"],
                               capture_output=True, text=True).stdout or "?",
        "kernel": os.uname().release,
        "cpus": os.cpu_count(),
    }


def start(cmd, marker=None):
    """Starts a process in its own group, reads its 'ready PID' line."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    STARTED.append(p)
    line = p.stdout.readline()
    if not line.startswith("ready"):
        raise RuntimeError(f"{cmd[0]} did not start: {line!r}")
    return p


def tree(n, mib=8):
    """A Python master and n-1 forked sleepers; the marker names them for smem."""
    p = start([sys.executable, "-c", FORKER, str(n), str(mib), f"lwbench-tree-{n}-x"])
    time.sleep(0.5)
    return p.pid


def members(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [pid] + [int(x) for x in f.read().split()]


def measured(cmd, timeout=None):
    """Runs cmd; returns (exit, stdout, stderr, cpu seconds, system seconds,
    peak RSS MiB, wall seconds). CPU from wait4 (the command and what it
    waited for). The peak from /usr/bin/time: a child forked from this
    script keeps the script's high-water RSS in ru_maxrss after exec."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as peak:
        t0 = time.monotonic()
        p = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", peak.name, *cmd], stdout=out,
                             stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        return {
            "exit": p.returncode,
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
            "cpu_s": ru.ru_utime + ru.ru_stime,
            "sys_s": ru.ru_stime,
            "peak_rss_mib": int(peak.read().split()[-1]) / 1024,
            "wall_s": wall,
        }


def attach(pid, *args, duration="10s"):
    out = tempfile.mkdtemp(prefix="lwbench-")
    r = measured([LEAKWATCH, "attach", str(pid), "--duration", duration, "--quiet",
                  "--out", os.path.join(out, "r"), *args])
    if r["exit"] != 0:
        raise RuntimeError(f"leakwatch attach failed: {r['stderr'][-800:]}")
    with open(os.path.join(out, "r", "summary.json")) as f:
        r["summary"] = json.load(f)
    shutil.rmtree(out, ignore_errors=True)
    return r


def floor(mode, pids, reps, sleep_ms=0):
    """The bare reads' CPU ms per sample; with sleep_ms, each sample after a
    sleep, as a sampler wakes (cold caches) — leakwatch's cheap tier is
    compared against that, at its own interval."""
    env = dict(os.environ, LEAKWATCH_TEST_FLOOR_SLEEP_MS=str(sleep_ms))
    r = subprocess.run([os.path.join(BIN, "proc_floor"), mode, str(reps), *map(str, pids)],
                       capture_output=True, text=True, check=True, env=env)
    return float(r.stdout.split("=")[1]) / 1e3  # ms


def marginal(run_short, run_long):
    """CPU ms per sample between two runs: (cpu, samples) each."""
    (c1, n1), (c2, n2) = run_short, run_long
    return (c2 - c1) / max(n2 - n1, 1) * 1e3


def leakwatch_cheap(pid, interval="200ms"):
    """leakwatch's own figures (its CPU clocks, to the ns): CPU per sweep,
    CPU per tick while sampling (samples.csv writing included), and whether
    it found processes by listing /proc."""
    r = attach(pid, "--deep-budget", "0", "--interval", interval, duration="10s")
    s = r["summary"]["sampling"]
    return {"sweep_cpu_ms": s["sweep_cpu_mean_ms"], "tick_cpu_ms": s["cpu_s"] / s["ticks"] * 1e3,
            "listing": s["listing_sweeps"] > s["ticks"] / 2}


def leakwatch_deep(pid):
    """CPU of one deep pass (the first and the last), from leakwatch's clock."""
    s = attach(pid, "--interval", "1s", duration="1s")["summary"]["sampling"]
    return s["deep_cpu_s"] / max(s["deep_samples"], 1) * 1e3, s["mapped_processes"]


PSUTIL_LOOP = r"""
import psutil, sys, time
pid, what, k, discover = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
root = psutil.Process(pid)
procs = [root] + root.children(recursive=True)
t0 = time.process_time()
for _ in range(k):
    if discover:
        procs = [root] + root.children(recursive=True)
    for p in procs:
        getattr(p, what)()
print((time.process_time() - t0) / k * 1e3)
"""


def psutil_ms(pid, what, k, discover):
    r = subprocess.run([os.path.join(VENV, "bin", "python"), "-c", PSUTIL_LOOP, str(pid), what,
                        str(k), "1" if discover else "0"], capture_output=True, text=True,
                       check=True)
    return float(r.stdout)


def psrecord_ms(pid, interval):
    runs = []
    for d in (2, 12):
        with tempfile.NamedTemporaryFile(suffix=".txt") as logf:
            r = measured([os.path.join(VENV, "bin", "psrecord"), str(pid), "--include-children",
                          "--interval", str(interval), "--duration", str(d), "--log", logf.name])
            with open(logf.name) as f:
                samples = sum(1 for line in f if line.strip() and not line.startswith("#"))
        runs.append((r["cpu_s"], samples))
    return marginal(*runs)


def smem_ms(marker):
    """One smem invocation is one sample; start-up measured with a filter
    that matches nothing, and taken off."""
    full = min(measured(["smem", "-P", marker])["cpu_s"] for _ in range(3))
    empty = min(measured(["smem", "-P", "no-such-process-xyz"])["cpu_s"] for _ in range(3))
    return (full - empty) * 1e3, full * 1e3


def compare(results):
    """Per-sample cost of each tool on one process, a 100- and a 1000-process tree."""
    single = start([sys.executable, "-c",
                    "import ctypes,signal,os; ctypes.CDLL(None).prctl(1,9); "
                    "x=b'\\x01'*(8<<20); print('ready',os.getpid(),flush=True); signal.pause()",
                    "lwbench-single-x"])
    targets = [("1 process", single.pid, "lwbench-single-x"),
               ("100 processes", tree(100), "lwbench-tree-100-x"),
               ("1000 processes", tree(1000), "lwbench-tree-1000-x")]
    rows = []
    for name, pid, marker in targets:
        pids = members(pid) if name != "1 process" else [pid]
        k = 50 if len(pids) > 1 else 2000
        log(f"compare: {name}")
        row = {"target": name, "processes": len(pids)}
        cheap = leakwatch_cheap(pid)
        row["leakwatch_sweep_ms"] = cheap["sweep_cpu_ms"]
        row["leakwatch_tick_ms"] = cheap["tick_cpu_ms"]
        row["leakwatch_listing"] = cheap["listing"]
        row["floor_cheap_ms"] = floor("listing" if cheap["listing"] else "children", pids, 40,
                                      sleep_ms=200)
        row["floor_statm_ms"] = floor("statm", pids, k)
        row["leakwatch_deep_pass_ms"], row["leakwatch_mapped"] = leakwatch_deep(pid)
        row["floor_deep_ms"] = floor(f"deep:{row['leakwatch_mapped']}", pids, max(k // 10, 3))
        row["floor_rollup_ms"] = floor("rollup", pids, max(k // 10, 3))
        row["floor_smaps_ms"] = floor("smaps", pids, max(k // 10, 3))
        row["psutil_memory_info_ms"] = psutil_ms(pid, "memory_info", k, discover=True)
        row["psutil_memory_info_known_ms"] = psutil_ms(pid, "memory_info", k, discover=False)
        row["psutil_memory_full_info_ms"] = psutil_ms(pid, "memory_full_info", max(k // 10, 3),
                                                      discover=False)
        row["psrecord_ms"] = psrecord_ms(pid, 0.2)
        row["smem_ms"], row["smem_invocation_ms"] = smem_ms(marker)
        rows.append(row)
        log(json.dumps(row))
    results["compare"] = rows


def goals(results, long):
    g = {}
    t1000 = tree(1000)
    log("goals: 1000-process tree")
    r = attach(t1000, "--interval", "200ms", duration="10s")
    g["tree1000_200ms"] = {k: r[k] for k in ("cpu_s", "sys_s", "peak_rss_mib", "wall_s")}
    g["tree1000_200ms"]["sampling"] = r["summary"]["sampling"]
    deep = attach(t1000, "--interval", "1s", duration="1s")
    cheap = attach(t1000, "--deep-budget", "0", "--interval", "1s", duration="1s")
    # leakwatch's CPU clock over the two deep passes; and the whole process's
    # extra CPU over a run without them (the report's PSS charts included).
    g["tree1000_first_last_deep_cpu_s"] = deep["summary"]["sampling"]["deep_cpu_s"]
    g["tree1000_first_last_whole_process_extra_cpu_s"] = deep["cpu_s"] - cheap["cpu_s"]
    g["tree1000_first_last"] = deep["summary"]["sampling"]
    r = attach(t1000, duration="60s")
    g["tree1000_default_60s"] = {k: r[k] for k in ("cpu_s", "peak_rss_mib", "wall_s")}

    t100 = tree(100)
    minutes = 10 if long else 1
    log(f"goals: 100-process tree, {minutes} min at default settings")
    r = attach(t100, duration=f"{minutes}m")
    g["tree100_default"] = {k: r[k] for k in ("cpu_s", "peak_rss_mib", "wall_s")}
    g["tree100_default"]["cpu_pct_of_one_core"] = r["cpu_s"] / r["wall_s"] * 100
    g["tree100_default"]["sampling"] = r["summary"]["sampling"]

    log("goals: 1 GiB target, 10 s at 100 ms, 5 times each (rusage counts 4 ms ticks)")
    gib = start([os.path.join(BIN, "mmap_loop"), "1", "hold"])
    for mode, args in (("default", []), ("deep_budget_0", ["--deep-budget", "0"])):
        runs = [attach(gib.pid, "--interval", "100ms", *args, duration="10s") for _ in range(5)]
        sys_s = [r["sys_s"] for r in runs]
        g[f"gib_{mode}"] = {
            "sys_s_mean": sum(sys_s) / len(sys_s), "sys_s_max": max(sys_s),
            "cpu_s_mean": sum(r["cpu_s"] for r in runs) / len(runs),
            "page_walks_max": max(r["summary"]["sampling"]["page_walks"] for r in runs),
            "deep_cpu_s_mean": sum(r["summary"]["sampling"]["deep_cpu_s"] for r in runs) / 5,
            "longest_walk_ms_max": max(r["summary"]["sampling"].get("longest_walk", {})
                                       .get("ms", 0) for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        }
    results["goals"] = g


CHURNER = r"""
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None)
libc.prctl(1, signal.SIGKILL)
signal.signal(signal.SIGCHLD, lambda *a: [os.waitpid(-1, os.WNOHANG) for _ in range(64)])
print("ready", os.getpid(), flush=True)
while True:  # a worker every 20 ms, each living 200 ms: ~10 alive, 50 new a second
    if os.fork() == 0:
        x = b"\x01" * (1 << 20)
        time.sleep(0.2)
        os._exit(0)
    time.sleep(0.02)
"""


def churn(results, durations=(30, 180)):
    """leakwatch's RSS while attached to a tree that recycles 50 workers a
    second, polled during sampling, for two session lengths: bounded state
    means the same peak."""
    out = []
    for seconds in durations:
        master = start([sys.executable, "-c", CHURNER])
        d = tempfile.mkdtemp(prefix="lwbench-")
        lw = subprocess.Popen([LEAKWATCH, "attach", str(master.pid), "--interval", "100ms",
                               "--duration", f"{seconds}s", "--quiet", "--out",
                               os.path.join(d, "r")])
        peak, t0 = 0, time.monotonic()
        # Polled while sampling: the analysis and reports come after.
        while lw.poll() is None and time.monotonic() - t0 < seconds - 0.5:
            try:
                with open(f"/proc/{lw.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            peak = max(peak, int(line.split()[1]))
            except OSError:
                pass
            time.sleep(0.5)
        lw.wait()
        with open(os.path.join(d, "r", "summary.json")) as f:
            s = json.load(f)
        events = sum(1 for _ in open(os.path.join(d, "r", "samples.csv")) if ",started," in _)
        out.append({"seconds": seconds, "sampling_peak_rss_mib": peak / 1024,
                    "workers_started": events, "ticks": s["sampling"]["ticks"],
                    "cpu_s": s["sampling"]["cpu_s"]})
        log(json.dumps(out[-1]))
        shutil.rmtree(d, ignore_errors=True)
        os.killpg(master.pid, signal.SIGKILL)
    results["churn"] = out


def interference(results, rounds=3, seconds=20, gib=3):
    """The mmap loop's latency unsampled, with a default attach and with
    --deep-budget 0, alternated `rounds` times."""
    out = {"unsampled": [], "default": [], "deep_budget_0": []}
    for i in range(rounds):
        for mode in out:
            log(f"interference: round {i + 1}, {mode}")
            loop = start([os.path.join(BIN, "mmap_loop"), str(gib), str(seconds)])
            walk = None
            if mode != "unsampled":
                args = ["--deep-budget", "0"] if mode == "deep_budget_0" else []
                r = attach(loop.pid, *args, duration=f"{seconds - 2}s")
                walk = r["summary"]["sampling"].get("longest_walk")
                walks = r["summary"]["sampling"]["page_walks"]
            line = loop.stdout.readline()
            loop.wait()
            stats = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)}
            if walk is not None or mode != "unsampled":
                stats["longest_walk_ms"] = walk["ms"] if walk else 0.0
                stats["page_walks"] = walks
            out[mode].append(stats)
            log(json.dumps(stats))
    results["interference"] = out


def report(results):
    print(f"\n## leakwatch overhead ({results['env']})\n")
    if "compare" in results:
        print("### Per sample, CPU ms (ratio to the kernel floor of the same information)\n")
        print("| | " + " | ".join(r["target"] for r in results["compare"]) + " |")
        print("|---|" + "---:|" * len(results["compare"]))

        def line(label, key, base):
            cells = [f"{r[key]:.2f} ({r[key] / r[base]:.1f}×)" for r in results["compare"]]
            print(f"| {label} | " + " | ".join(cells) + " |")

        line("kernel floor: status + fstat(fd) + children or a /proc listing, every 200 ms",
             "floor_cheap_ms",
             "floor_cheap_ms")
        line("leakwatch sweep (its CPU clock)", "leakwatch_sweep_ms", "floor_cheap_ms")
        line("leakwatch whole tick (sweep, samples.csv, timing)", "leakwatch_tick_ms",
             "floor_cheap_ms")
        line("kernel floor: statm (tight loop, as psutil is measured)", "floor_statm_ms",
             "floor_statm_ms")
        line("psutil memory_info, children found each sample", "psutil_memory_info_ms",
             "floor_statm_ms")
        line("psutil memory_info, processes known", "psutil_memory_info_known_ms",
             "floor_statm_ms")
        line("psrecord --include-children (marginal)", "psrecord_ms", "floor_statm_ms")
        line("kernel floor: deep pass (smaps ≤32, smaps_rollup the rest)", "floor_deep_ms",
             "floor_deep_ms")
        line("leakwatch deep pass (its CPU clock)", "leakwatch_deep_pass_ms", "floor_deep_ms")
        line("kernel floor: smaps_rollup", "floor_rollup_ms", "floor_rollup_ms")
        line("psutil memory_full_info", "psutil_memory_full_info_ms", "floor_rollup_ms")
        line("kernel floor: smaps", "floor_smaps_ms", "floor_smaps_ms")
        line("smem (one run, start-up taken off)", "smem_ms", "floor_smaps_ms")
        print("\nTools against leakwatch, per sample:")
        for r in results["compare"]:
            lw, deep = r["leakwatch_tick_ms"], r["leakwatch_deep_pass_ms"]
            print(f"- {r['target']}: psutil memory_info {r['psutil_memory_info_ms'] / lw:.1f}× "
                  f"a leakwatch tick, psrecord {r['psrecord_ms'] / lw:.1f}×; psutil "
                  f"memory_full_info {r['psutil_memory_full_info_ms'] / deep:.1f}× a leakwatch "
                  f"deep pass, smem {r['smem_ms'] / deep:.1f}× (smem reads full smaps of every "
                  f"process, leakwatch of {r['leakwatch_mapped']})")
    if "goals" in results:
        print("\n### Goals\n")
        print(json.dumps(results["goals"], indent=1))
    if "churn" in results:
        print("\n### Worker churn (50 new workers a second), leakwatch's RSS while sampling\n")
        for c in results["churn"]:
            print(f"- {c['seconds']} s: {c['workers_started']} workers started, peak RSS "
                  f"{c['sampling_peak_rss_mib']:.1f} MiB, {c['cpu_s']:.2f} s CPU")
    if "interference" in results:
        print("\n### Interference (mmap/touch/munmap of 256 KiB, 3 GiB resident), µs\n")
        print("| mode | rounds | p99 | p99.9 | worst | longest walk reported |")
        print("|---|---:|---:|---:|---:|---:|")
        for mode, runs in results["interference"].items():
            worst = max(r["max_us"] for r in runs)
            p99 = max(r["p99_us"] for r in runs)
            p999 = max(r["p999_us"] for r in runs)
            walk = max((r.get("longest_walk_ms", 0) for r in runs), default=0)
            cells = ", ".join(f"{r['max_us'] / 1e3:.1f}" for r in runs)
            walk = "—" if mode == "unsampled" else f"{walk:.1f} ms"
            print(f"| {mode} | {len(runs)} | {p99:.0f} | {p999:.0f} | {worst:.0f} "
                  f"(per round, ms: {cells}) | {walk} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--long", action="store_true", help="attach to the 100-process tree for 10 min")
    ap.add_argument("--only", choices=["compare", "goals", "churn", "interference"])
    ap.add_argument("--json", default=os.path.join(TARGET, "overhead.json"))
    args = ap.parse_args()
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    results = {"env": setup()}
    if args.only in (None, "compare"):
        compare(results)
    if args.only in (None, "goals"):
        goals(results, args.long)
    if args.only in (None, "churn"):
        churn(results)
    if args.only in (None, "interference"):
        interference(results)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    report(results)
    print(f"\n(all figures: {args.json})")


if __name__ == "__main__":
    main()
