#!/usr/bin/env python3
"""A day of `leakwatch attach` on a 100-process tree, without waiting a day.

Writes a samples.csv as attach would: one cheap row per process per second
for 24 hours (8.64 million rows), a deep row for every process once an hour,
with a known truth: process 1001 leaks 1 MiB/h of RssAnon, the others are
flat with noise. Then runs `leakwatch report` on it under /usr/bin/time and
prints its wall time and peak RSS (the claim: within 64 MiB, whatever the
session's length).

Usage: python3 benches/harness/long_session.py [--hours 24] [--processes 100]
       [--out /tmp/lw-day]  (needs a release build: cargo build --release)
"""

import argparse
import os
import random
import re
import subprocess
import sys
import time

HEADER = (
    "sample,run,t_seconds,timestamp,scope,pid,ppid,start_time,comm,tier,event,"
    "exit_code,rss_bytes,anon_bytes,file_bytes,shmem_bytes,swap_bytes,hwm_bytes,"
    "threads,fds,pss_bytes,pss_anon_bytes,pss_file_bytes,pss_shmem_bytes,"
    "shared_clean_bytes,shared_dirty_bytes,private_clean_bytes,private_dirty_bytes,"
    "uss_bytes,shared_bytes,swap_pss_bytes\n"
)
MIB = 1 << 20


def generate(path, hours, processes):
    rng = random.Random(1)
    seconds = hours * 3600
    pids = [1000 + i for i in range(processes)]
    with open(path, "w", buffering=1 << 20) as f:
        f.write(HEADER)
        for t in range(seconds):
            deep = t % 3600 == 0 or t == seconds - 1
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(1_700_000_000 + t))
            lines = []
            for pid in pids:
                anon = 40 * MIB + (t * MIB // 3600 if pid == 1001 else 0)
                anon += rng.randrange(-64, 64) * 1024
                file_ = 8 * MIB
                rss = anon + file_
                common = (
                    f"{t},,{t:.3f},{stamp},target,{pid},{1000 if pid != 1000 else 1},"
                    f"{5000 + pid},worker-{pid},"
                )
                if deep:
                    lines.append(
                        common + f"deep,,,{rss},{anon},{file_},0,0,{rss},4,12,"
                        f"{anon + file_ // 4},{anon},{file_ // 4},0,{file_},0,0,{anon},{anon},{file_},0\n"
                    )
                else:
                    lines.append(common + f"cheap,,,{rss},{anon},{file_},0,0,{rss},4,12,,,,,,,,,,,\n")
            f.write("".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--processes", type=int, default=100)
    ap.add_argument("--out", default="/tmp/lw-day")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lw = os.path.join(root, "target", "release", "leakwatch")
    os.makedirs(args.out, exist_ok=True)
    csv = os.path.join(args.out, "samples.csv")
    if not os.path.exists(csv):
        t0 = time.time()
        generate(csv, args.hours, args.processes)
        print(f"generated {csv} ({os.path.getsize(csv) / MIB:.0f} MiB) in {time.time() - t0:.0f}s")
    out = os.path.join(args.out, "report")
    subprocess.run(["rm", "-rf", out], check=True)
    t0 = time.time()
    run = subprocess.run(
        ["/usr/bin/time", "-v", lw, "report", csv, "--out", out],
        capture_output=True, text=True,
    )
    wall = time.time() - t0
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr)
    print(run.stderr[-1500:] if run.returncode else run.stderr.split("\tCommand")[0][-600:])
    print(f"leakwatch report: exit {run.returncode}, {wall:.1f}s wall, peak RSS "
          f"{int(peak.group(1)) / 1024:.1f} MiB" if peak else "no /usr/bin/time output")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
