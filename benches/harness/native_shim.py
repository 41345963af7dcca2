#!/usr/bin/env python3
"""What the --native-sites shim costs an allocation-heavy program, beside
what people run instead, all measured in the same run.

Builds benches/harness/alloc_churn.c (malloc/free pairs of 16-1024 B through a
ring of 4096 live blocks) with cc -O2 and the shim with cargo (release),
then times the program: alone; with a preloaded malloc and free that only
forward to glibc's (the floor of any such shim); with one idle preloaded
thread (what a thread of the shim's own would cost: glibc's malloc locks
its arenas once a process has two threads; the shim keeps its tables in a
file instead); with the shim at several mean
sampling intervals (a huge one: the hooks alone, no thread); under
heaptrack; and under jemalloc without and with its sampled profiler
(Debian's libjemalloc2, lg_prof_sample 19 = 512 KiB, its default).
The program alone, forwarding, the thread and the shim run interleaved,
--repeat rounds of each: the best user + system CPU (wait4), its ratio to
the best alone, and the median over rounds of each round's ratio. The shim's own memory: a process' RSS with
the shim minus without. A real server: memcached's own CPU time for a
fixed pipelined load, with and without the shim.

Also the accuracy of the estimate itself (no fit): a program that keeps a
known number of bytes in blocks of one size, read from its real sites
file, over --accuracy-repeats programs per interval: the mean error and
the spread of the estimate.

  python3 benches/harness/native_shim.py                 # every part, 10 M pairs, 5 rounds
  python3 benches/harness/native_shim.py --pairs 2000000 --repeat 3
  python3 benches/harness/native_shim.py --parts overhead --intervals 64   # the shim's cost alone
  LEAKWATCH_SHIM=/tmp/old.so python3 benches/harness/native_shim.py --parts overhead  # another build
  python3 benches/harness/native_shim.py --parts overhead --compare /tmp/old.so  # both, interleaved
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "target", "bench-bin")
SHIM = os.environ.get("LEAKWATCH_SHIM") or os.path.join(ROOT, "target", "release", "libleakwatch_shim.so")
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
FORWARD_SO = os.path.join(BIN, "forward.so")
THREAD_SO = os.path.join(BIN, "idle_thread.so")

KEEPER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* Keeps COUNT blocks of SIZE bytes, says "ready", waits for stdin to close. */
__attribute__((noinline)) void *keep(size_t size) { void *p = malloc(size); memset(p, 1, size); return p; }
int main(int argc, char **argv) {
    long count = atol(argv[1]); size_t size = (size_t)atol(argv[2]);
    for (long i = 0; i < count; i++) if (!keep(size)) return 1;
    puts("ready"); fflush(stdout);
    char c; while (read(0, &c, 1) > 0) {}
    return 0;
}
"""


FORWARD = r"""
#include <stddef.h>
/* The floor of any preloaded allocator shim: malloc and free that only
 * forward to glibc's own entry points, as the shim's hooks do. */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
void *malloc(size_t n) { return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
"""


IDLE_THREAD = r"""
#include <pthread.h>
#include <unistd.h>
/* One idle thread, as a thread of the shim would be between questions:
 * glibc's malloc takes its arena locks once a process has two threads. */
static void *idle(void *arg) { for (;;) pause(); return arg; }
__attribute__((constructor)) static void start(void) {
    pthread_t t;
    if (pthread_create(&t, 0, idle, 0) == 0) pthread_detach(t);
}
"""


def build():
    os.makedirs(BIN, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "leakwatch-shim"], cwd=ROOT, check=True)
    churn = os.path.join(BIN, "alloc_churn")
    subprocess.run(["cc", "-O2", "-o", churn, os.path.join(ROOT, "benches", "harness", "alloc_churn.c")], check=True)
    keeper_c = os.path.join(BIN, "keeper.c")
    with open(keeper_c, "w") as f:
        f.write(KEEPER)
    keeper = os.path.join(BIN, "keeper")
    subprocess.run(["cc", "-O2", "-o", keeper, keeper_c], check=True)
    forward_c = os.path.join(BIN, "forward.c")
    with open(forward_c, "w") as f:
        f.write(FORWARD)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", FORWARD_SO, forward_c], check=True)
    thread_c = os.path.join(BIN, "idle_thread.c")
    with open(thread_c, "w") as f:
        f.write(IDLE_THREAD)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", THREAD_SO, thread_c, "-lpthread"], check=True)
    return churn, keeper


def cpu_of(argv, env):
    """User + system seconds and peak RSS (KiB) of one run. The peak by
    /usr/bin/time (a fork: wait4's ru_maxrss after posix_spawn's vfork would
    count this Python's own pages); the CPU by wait4 on /usr/bin/time, whose
    rusage includes the program it waited for, in microseconds (time's own
    %U %S have 10 ms steps: 5% of a 0.2 s run)."""
    with tempfile.NamedTemporaryFile("r") as t:
        p = subprocess.Popen(["/usr/bin/time", "-o", t.name, "-f", "%M"] + argv, env=env,
                             stdout=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise subprocess.CalledProcessError(p.returncode, argv)
        m = t.read().split()[-1]
    return ru.ru_utime + ru.ru_stime, int(m)


def best(argv, env, repeat):
    runs = [cpu_of(argv, env) for _ in range(repeat)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


def shim_env(d, interval, shim=None):
    env = dict(os.environ)
    env.update(LD_PRELOAD=shim or SHIM, LEAKWATCH_NATIVE_DIR=d, LEAKWATCH_NATIVE_INTERVAL=str(interval))
    return env


def overhead(churn, pairs, repeat, d, intervals, others, compare=None):
    """Interleaved: each of --repeat rounds runs every configuration once, so
    that a slow spell of a shared machine falls on all of them; the best CPU
    of each, and the median over rounds of its ratio to the same round's run
    alone (steadier than the ratio of bests on a noisy machine)."""
    base_env = dict(os.environ)
    argv = [churn, str(pairs)]
    configs = [("alone (glibc)", base_env),
               ("forwarding only (preloaded malloc/free calling glibc's)",
                dict(base_env, LD_PRELOAD=FORWARD_SO)),
               ("an idle thread (preloaded; glibc's malloc in its multi-threaded mode)",
                dict(base_env, LD_PRELOAD=THREAD_SO))]
    configs += [(f"shim, interval {interval >> 10} KiB", shim_env(d, interval)) for interval in intervals]
    if compare:
        configs += [(f"shim {compare}, interval {interval >> 10} KiB", shim_env(d, interval, compare))
                    for interval in intervals]
    runs = {name: [] for name, _ in configs}
    for _ in range(repeat):
        for name, env in configs:
            runs[name].append(cpu_of(argv, env))
    base = min(r[0] for r in runs["alone (glibc)"])
    base_rss = max(r[1] for r in runs["alone (glibc)"])
    print(f"| {pairs:,} malloc/free pairs of 16-1024 B, {repeat} rounds | best CPU s | ratio of bests "
          "| median ratio | peak RSS (KiB) |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in configs:
        t = min(r[0] for r in runs[name])
        rss = max(r[1] for r in runs[name])
        ratios = sorted(a[0] / b[0] for a, b in zip(runs[name], runs["alone (glibc)"]))
        median = ratios[len(ratios) // 2]
        extra = f" (+{rss - base_rss})" if name.startswith("shim") else ""
        print(f"| {name} | {t:.3f} | {t / base:.2f}x | {median:.3f}x | {rss}{extra} |")
    if others and os.path.exists(JEMALLOC):
        env = dict(base_env, LD_PRELOAD=JEMALLOC)
        t, rss = best(argv, env, repeat)
        print(f"| jemalloc, no profiling | {t:.3f} | {t / base:.2f}x | - | {rss} |")
        env = dict(env, MALLOC_CONF="prof:true,prof_active:true,lg_prof_sample:19")
        tp, rss = best(argv, env, repeat)
        print(f"| jemalloc prof, 512 KiB | {tp:.3f} | {tp / base:.2f}x ({tp / t:.2f}x of jemalloc) | - | {rss} |")
    if others and shutil.which("heaptrack"):
        out = os.path.join(d, "ht")
        t, _ = best(["/usr/bin/heaptrack", "-o", out, churn, str(pairs)], base_env, 1)
        print(f"| heaptrack (1 run) | {t:.3f} | {t / base:.2f}x | - | - |")


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def shim_memory(keeper, d):
    """The shim's own resident memory in a process that holds 64 MiB in
    1 KiB blocks (its tables and its sites file's pages)."""
    rss = {}
    for name, env in (("without", dict(os.environ)), ("with", shim_env(d, 64 << 10))):
        p = subprocess.Popen([keeper, str(65536), "1024"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        p.stdout.readline()
        if name == "with":
            ask_when_ready(d, p.pid)
        rss[name] = rss_kib(p.pid)
        p.stdin.close()
        p.wait()
    print(f"\nshim's own memory, 64 MiB live in 1 KiB blocks at 64 KiB: {rss['with'] - rss['without']} KiB "
          f"(RSS {rss['without']} -> {rss['with']} KiB)")


def memcached_cpu(d, interval):
    """memcached's own CPU seconds (utime + stime) for 400k pipelined sets
    and 400k gets of 100-byte values, with the shim (interval) or without."""
    port = 32000 + (interval or 0) % 1000
    env = shim_env(d, interval) if interval else dict(os.environ)
    argv = ["memcached", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", "1024", "-t", "1"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    p = subprocess.Popen(argv, env=env)
    try:
        for _ in range(250):
            try:
                s = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                time.sleep(0.02)
        for part in range(40):
            keys = range(part * 10000, (part + 1) * 10000)
            s.sendall(b"".join(b"set k%d 0 0 100 noreply\r\n%s\r\n" % (k, b"v" * 100) for k in keys))
            s.sendall(b"".join(b"get k%d\r\n" % k for k in keys) + b"version\r\n")
            data = b""
            while not data.endswith(b"\r\n") or b"VERSION" not in data[-40:]:
                data += s.recv(1 << 20)
        s.close()
        f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return (int(f[11]) + int(f[12])) / tick
    finally:
        p.terminate()
        p.wait()


def memcached(d, repeat):
    if not shutil.which("memcached"):
        return
    base = min(memcached_cpu(d, None) for _ in range(repeat))
    print("\n| memcached, 400k sets + 400k gets | its CPU s | ratio |")
    print("|---|---:|---:|")
    print(f"| alone | {base:.2f} | 1.00x |")
    for interval in (64 << 10, 512 << 10):
        t = min(memcached_cpu(d, interval) for _ in range(repeat))
        print(f"| shim, interval {interval >> 10} KiB | {t:.2f} | {t / base:.2f}x |")


def ask_when_ready(d, pid):
    """The live bytes of each stack in process pid's sites file, once the
    shim has made it (its layout: shim/src/layout.rs)."""
    path = os.path.join(d, f"{pid}.sites")
    for _ in range(100):
        if os.path.exists(path):
            return read_sites(path)
        time.sleep(0.01)
    return []


def read_sites(path):
    header, stacks, slot = 4096, 1 << 13, 32
    with open(path, "rb") as f:
        if f.read(8) != b"lwsites\0":
            return []
        f.seek(header)
        slots = f.read(stacks * slot)
    live = []
    for i in range(stacks):
        s = slots[i * slot:(i + 1) * slot]
        if int.from_bytes(s[0:4], "little"):
            live.append(int.from_bytes(s[8:16], "little", signed=True))
    return live


def estimate(keeper, d, interval, count, size):
    env = shim_env(d, interval)
    p = subprocess.Popen([keeper, str(count), str(size)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        p.stdout.readline()
        live = ask_when_ready(d, p.pid)
    finally:
        p.stdin.close()
        p.wait()
    # The keep() stack is the one holding the most.
    return max(live, default=0)


def accuracy(keeper, d, repeats):
    truth = 10 << 20
    print(f"\n| live {truth >> 20} MiB in blocks of | interval | mean error | sd of the estimate | expected sd 1/sqrt(n) |")
    print("|---|---|---:|---:|---:|")
    for size in (64, 1024, 16384):
        for interval in (16 << 10, 64 << 10, 512 << 10):
            est = [estimate(keeper, d, interval, truth // size, size) for _ in range(repeats)]
            mean = sum(est) / len(est)
            sd = (sum((e - mean) ** 2 for e in est) / max(len(est) - 1, 1)) ** 0.5
            expected = (interval / truth) ** 0.5 if size < interval else 0
            print(f"| {size} B | {interval >> 10} KiB | {100 * (mean - truth) / truth:+.1f}% | {100 * sd / truth:.1f}% | {100 * expected:.1f}% |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--accuracy-repeats", type=int, default=20)
    ap.add_argument("--parts", default="overhead,others,memory,memcached,accuracy",
                    help="which measurements, comma-separated (default: all; `others`: "
                    "jemalloc's profiler and heaptrack in the overhead table)")
    ap.add_argument("--intervals", default="16,64,128,512",
                    help="the shim's mean sampling intervals for the overhead table, KiB")
    ap.add_argument("--compare", metavar="SO",
                    help="another build of the shim, interleaved in the overhead table")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    intervals = [int(k) << 10 for k in args.intervals.split(",")]
    churn, keeper = build()
    with tempfile.TemporaryDirectory(prefix="lw-native-bench") as d:
        os.chmod(d, 0o700)
        print(f"shim: {SHIM}")
        if "overhead" in parts:
            overhead(churn, args.pairs, args.repeat, d, intervals, "others" in parts, args.compare)
        if "memory" in parts:
            shim_memory(keeper, d)
        if "memcached" in parts:
            memcached(d, args.repeat)
        if "accuracy" in parts:
            accuracy(keeper, d, args.accuracy_repeats)


if __name__ == "__main__":
    main()
