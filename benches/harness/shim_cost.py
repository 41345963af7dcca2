#!/usr/bin/env python3
"""What the --native-sites shim costs, preloaded (`run --native-sites`) and
injected (`attach --native-sites`), on three allocation loops, beside
heaptrack and jemalloc's profiler, all in the same run.

The loops (benches/harness/loops/, built with cc -O2):
  churn_ring    alloc_churn.c's loop: pairs of 16-1024 B through a ring of
                4096 live blocks (CPU time of the loop)
  kept_ring     pairs of 16-1024 B freed at once (glibc's thread cache),
                one block in 64 kept in a ring of 1024 (CPU time)
  deep_ring     kept_ring's loop 24 calls deep, as a server's handlers
                allocate: every sampled stack ≈ 30 frames (CPU time)
  cross_thread  one thread allocates 16-1024 B, another frees, in batches
                of 256 (wall time of the exchange)
Each loop times itself, so start-up (loading the shim, heaptrack's own
start) is not counted. Modes: alone (glibc); preloaded malloc/free that
only forward to glibc's (the floor of any shim); the shim preloaded with
sampling on but an interval no loop reaches (hooks: its unsampled fast
paths alone); the shim preloaded at leakwatch's default interval
(--native-interval 64KiB, as `run --native-sites` passes it) and at
512 KiB (preloaded-512k: jemalloc's default, for the cost of samples); the
shim injected by `leakwatch attach
--native-sites` (the same default) into the running loop before it starts
(its pause not counted); heaptrack; jemalloc alone and with its profiler (lg_prof_sample
19 = 512 KiB, its default). Every mode runs once per round, --rounds
rounds interleaved; the figure is the median over rounds of the round's
ratio to the same round's run alone (jemalloc's profiler also to jemalloc
alone), with the median's 95% interval by order statistics (distribution-free:
the ranks a binomial(rounds, 1/2) puts 2.5% beyond on each side), which is
what a sitting on a shared machine can tell apart.

  python3 benches/harness/shim_cost.py
  python3 benches/harness/shim_cost.py --rounds 11 --loops kept_ring --modes preloaded,injected
  LEAKWATCH_SHIM=/tmp/old.so python3 benches/harness/shim_cost.py   # another shim build
"""

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOOPS = os.path.join(ROOT, "benches", "harness", "loops")
# Where cargo builds (CARGO_TARGET_DIR when set, as cargo itself reads it).
RELEASE = os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"), "release")
LEAKWATCH = os.path.join(RELEASE, "leakwatch")
SHIM = os.environ.get("LEAKWATCH_SHIM") or os.path.join(RELEASE, "libleakwatch_shim.so")
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
HEAPTRACK = shutil.which("heaptrack")

FORWARD = r"""
#include <stddef.h>
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
void *malloc(size_t n) { return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
"""

PAIRS = {"churn_ring": 10_000_000, "kept_ring": 20_000_000, "deep_ring": 20_000_000,
         "cross_thread": 2_000_000}
MODES = ["forward", "hooks", "preloaded", "preloaded-512k", "injected", "heaptrack", "jemalloc",
         "jemalloc-prof"]
# Bytes between samples by preloaded mode; hooks' is never reached (2^50 B).
INTERVALS = {"hooks": 1 << 50, "preloaded": 64 * 1024, "preloaded-512k": 512 * 1024}


def build(tmp):
    subprocess.run(["cargo", "build", "--release", "--bins", "-p", "leakwatch", "-p", "leakwatch-shim"],
                   cwd=ROOT, check=True)
    exes = {}
    for name in PAIRS:
        exe = os.path.join(tmp, name)
        subprocess.run(["cc", "-O2", "-pthread", "-o", exe, os.path.join(LOOPS, name + ".c")], check=True)
        exes[name] = exe
    src = os.path.join(tmp, "forward.c")
    with open(src, "w") as f:
        f.write(FORWARD)
    forward = os.path.join(tmp, "forward.so")
    # -fno-plt: one indirect jump into glibc, as the shim's own tail jumps (with a PLT the
    # floor would pay a direct jump more, a call).
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-fno-plt", "-o", forward, src], check=True)
    return exes, forward


def result(stdout):
    """The loop's seconds: its last line of two numbers (heaptrack adds its own lines)."""
    for line in reversed(stdout.splitlines()):
        m = re.fullmatch(r"(\d+\.\d+) \d+", line.strip())
        if m:
            return float(m.group(1))
    raise RuntimeError("no result line in: " + stdout[-400:])


def run_plain(argv, env):
    out = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    return result(out)


def run_injected(exe, pairs, tmp):
    trigger = os.path.join(tmp, "go")
    if os.path.exists(trigger):
        os.remove(trigger)
    prog = subprocess.Popen([exe, str(pairs), trigger], stdout=subprocess.PIPE, text=True)
    assert prog.stdout.readline().strip() == "ready"
    out = os.path.join(tmp, "out-%d" % time.monotonic_ns())
    watcher = subprocess.Popen(
        [LEAKWATCH, "attach", "--native-sites", "--exit-zero", "--out", out, str(prog.pid)],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, LEAKWATCH_SHIM=SHIM))
    entered = False
    for line in watcher.stderr:
        if re.search(r"the process was stopped \d+ ms", line):
            entered = True
            break
    if not entered:
        prog.kill()
        sys.exit("leakwatch attach did not enter the loop: " + watcher.stderr.read())
    open(trigger, "w").close()
    seconds = result(prog.stdout.read())
    prog.wait()
    watcher.communicate()
    shutil.rmtree(out, ignore_errors=True)
    return seconds


def one(mode, exe, pairs, tmp, forward):
    argv = [exe, str(pairs), "-"]
    env = dict(os.environ)
    if mode == "alone":
        return run_plain(argv, env)
    if mode == "forward":
        return run_plain(argv, dict(env, LD_PRELOAD=forward))
    if mode in INTERVALS:
        d = tempfile.mkdtemp(dir=tmp)
        try:
            return run_plain(argv, dict(env, LD_PRELOAD=SHIM, LEAKWATCH_NATIVE_DIR=d,
                                           LEAKWATCH_NATIVE_INTERVAL=str(INTERVALS[mode])))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    if mode == "injected":
        return run_injected(exe, pairs, tmp)
    if mode == "heaptrack":
        return run_plain([HEAPTRACK, "-o", os.path.join(tmp, "ht")] + argv, env)
    if mode == "jemalloc":
        return run_plain(argv, dict(env, LD_PRELOAD=JEMALLOC))
    if mode == "jemalloc-prof":
        return run_plain(argv, dict(env, LD_PRELOAD=JEMALLOC,
                                    MALLOC_CONF="prof:true,prof_active:true,lg_prof_sample:19"))
    raise ValueError(mode)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def median_ci95(xs):
    """The median's 95% interval by order statistics: the k-th smallest and
    k-th largest, k the largest with P(binomial(n, 1/2) < k) <= 2.5% (at
    least 1: n = 7 gives the extremes, n = 21 the 6th from each end)."""
    xs = sorted(xs)
    n = len(xs)
    k, below = 0, 0.0
    while True:
        below += math.comb(n, k) / 2 ** n
        if below > 0.025:
            break
        k += 1
    k = max(k, 1)
    return xs[k - 1], xs[n - k]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--loops", default=",".join(PAIRS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies each loop's count")
    args = ap.parse_args()
    modes = args.modes.split(",")
    if "heaptrack" in modes and not HEAPTRACK:
        print("skipped heaptrack: not on PATH (apt-get install heaptrack)", file=sys.stderr)
        modes.remove("heaptrack")
    if not os.path.exists(JEMALLOC):
        for m in [m for m in modes if m.startswith("jemalloc")]:
            print(f"skipped {m}: no {JEMALLOC} (apt-get install libjemalloc2)", file=sys.stderr)
            modes.remove(m)
    with tempfile.TemporaryDirectory() as tmp:
        exes, forward = build(tmp)
        for name in args.loops.split(","):
            pairs = int(PAIRS[name] * args.scale)
            runs = {m: [] for m in ["alone"] + modes}
            for _ in range(args.rounds):
                for m in runs:
                    runs[m].append(one(m, exes[name], pairs, tmp, forward))
            alone = runs["alone"]
            print(f"\n| {name}, {pairs:,} blocks, {args.rounds} rounds | median s "
                  "| median ratio to alone | its 95% interval |")
            print("|---|---:|---:|---:|")
            for m, ts in runs.items():
                ratios = [t / a for t, a in zip(ts, alone)]
                lo, hi = median_ci95(ratios)
                extra = ""
                if m == "jemalloc-prof" and "jemalloc" in runs:
                    extra = f" ({median([t / j for t, j in zip(ts, runs['jemalloc'])]):.3f}x of jemalloc)"
                print(f"| {m} | {median(ts):.3f} | {median(ratios):.3f}x{extra} | {lo:.3f}–{hi:.3f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
