#!/usr/bin/env python3
"""What `leakwatch attach --native-sites` costs a running allocation-heavy
program, and how long it stops it.

The program (below) allocates and frees N pairs of 16-1024 B through a ring of
4096 live blocks, as benches/harness/alloc_churn.c does, but only once a
trigger file exists: it idles in clock_nanosleep until then, a safe point for
the injection. Each figure is the best of --repeat runs of the churn's own CPU
time (getrusage of the whole process: the shim's patching thread included),
alone and with leakwatch attached with --native-sites at each interval; the
ratio to alone; and the pause leakwatch reports (gdb's attach to its detach).
The shim is injected (dlopened, its GOT entries patched); its thread-locals
are in the static TLS block all the same (shim/src/sampler.rs). The cost on
three loops beside preloaded, heaptrack and jemalloc: shim_cost.py.

  python3 benches/harness/native_attach.py
  python3 benches/harness/native_attach.py --pairs 20000000 --repeat 5
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LEAKWATCH = os.path.join(ROOT, "target", "release", "leakwatch")
SHIM = os.path.join(ROOT, "target", "release", "libleakwatch_shim.so")

CHURN = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#define RING 4096
static double cpu(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    struct timespec tick = {0, 10 * 1000 * 1000};
    printf("ready\n");
    fflush(stdout);
    while (access(argv[2], F_OK) != 0) nanosleep(&tick, NULL);
    static char *ring[RING];
    uint64_t x = 88172645463325252ull, sum = 0;
    double t0 = cpu();
    for (long i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t size = 16 + (x % 1009);
        int slot = (int)(i & (RING - 1));
        free(ring[slot]);
        ring[slot] = malloc(size);
        if (!ring[slot]) return 1;
        ring[slot][0] = (char)i;
        sum += (unsigned char)ring[slot][size / 2];
    }
    printf("%.6f %llu\n", cpu() - t0, (unsigned long long)sum);
    fflush(stdout);
    /* Stay a moment so leakwatch's last sample finds it. */
    sleep(1);
    return 0;
}
"""


def build(tmp):
    subprocess.run(
        ["cargo", "build", "--release", "--lib", "--bins"], cwd=ROOT, check=True
    )
    src = os.path.join(tmp, "churn.c")
    exe = os.path.join(tmp, "churn")
    with open(src, "w") as f:
        f.write(CHURN)
    subprocess.run(["cc", "-O2", "-o", exe, src], check=True)
    return exe


def one(exe, tmp, pairs, interval):
    """The churn's CPU seconds, and the pause leakwatch reported (ms)."""
    trigger = os.path.join(tmp, "go")
    if os.path.exists(trigger):
        os.remove(trigger)
    prog = subprocess.Popen(
        [exe, str(pairs), trigger], stdout=subprocess.PIPE, text=True
    )
    assert prog.stdout.readline().strip() == "ready"
    watcher, pause = None, None
    if interval:
        out = os.path.join(tmp, "out-%d" % time.monotonic_ns())
        env = dict(os.environ, LEAKWATCH_SHIM=SHIM)
        watcher = subprocess.Popen(
            [LEAKWATCH, "attach", "--native-sites", "--native-interval", interval,
             "--exit-zero", "--out", out, str(prog.pid)],
            stderr=subprocess.PIPE, text=True, env=env,
        )
        for line in watcher.stderr:
            m = re.search(r"the process was stopped (\d+) ms", line)
            if m:
                pause = int(m.group(1))
                break
            if "error" in line.lower():
                sys.exit("leakwatch: " + line)
    open(trigger, "w").close()
    seconds = float(prog.stdout.readline().split()[0])
    prog.wait()
    if watcher:
        watcher.communicate()
    return seconds, pause


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--intervals", default="64KiB,512KiB")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        modes = [None] + args.intervals.split(",")
        best = {}
        pauses = {}
        for _ in range(args.repeat):
            for mode in modes:
                s, p = one(exe, tmp, args.pairs, mode)
                best[mode] = min(best.get(mode, s), s)
                if p is not None:
                    pauses.setdefault(mode, []).append(p)
        alone = best[None]
        print(f"{args.pairs} malloc/free pairs of 16-1024 B, best of {args.repeat}")
        print(f"{'mode':<28} {'CPU s':>8} {'ratio':>6}  pause ms")
        print(f"{'alone':<28} {alone:8.3f} {1.0:6.2f}")
        for mode in modes[1:]:
            p = pauses.get(mode, [])
            span = f"{min(p)}-{max(p)}" if p else "-"
            print(f"{'attach --native-sites ' + mode:<28} {best[mode]:8.3f} "
                  f"{best[mode] / alone:6.2f}  {span}")


if __name__ == "__main__":
    main()
