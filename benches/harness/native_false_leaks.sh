#!/usr/bin/env bash
# False leaks of `run --native-sites` on scratch buffers, over many sessions:
# fixtures/native/scratch_daemon.c runs 65 scratch sites per request (buffers
# replaced, a random number of them, realloc-grown and trimmed, calloc'd,
# freed within the request, posix_memalign'd, aligned_alloc'd, mmap'd,
# mmap'd and grown by mremap) and
# two leaking ones (leak_state_16k: 1 MiB/run in 16 KiB blocks;
# leak_small_entries: 256 KiB/run in 128 B blocks). Each session is one
# `leakwatch run -n RUNS --native-sites --native-interval INTERVAL`.
#
# Every site of every session is judged (the site-verdicts example: the
# report lists only leaks, plateaus and sites holding ≥ 1 MiB). Prints the
# scratch-site judgements by verdict and by kind, the false leaks (scratch
# sites called a leak) with their rate and CI, their share with its exact
# one-sided 95% upper bound (Clopper–Pearson; 3/n for none, the rule of
# three), scratch sites never sampled, the controls' verdicts and rates
# against the truth, the sessions that failed and the time per session.
#
# Usage: bash benches/harness/native_false_leaks.sh [SESSIONS=80] [INTERVAL=64KiB, the default] [RUNS=10]
# LEAKWATCH_TEST_KEEP_FALSE_LEAKS=DIR keeps the output directory of every session
# with a false leak (or a failure) in DIR. Every daemon a session left is
# stopped (by leakwatch; any still running by this script, by PID) and the
# temporary directory removed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-80}
INTERVAL=${2:-64KiB}
RUNS=${3:-10}
KEEP=${LEAKWATCH_TEST_KEEP_FALSE_LEAKS:-}
nice -n 10 cargo build --release --quiet --lib --bins --example site-verdicts
tmp=$(mktemp -d)
daemon="$tmp/scratch_daemon"

# PIDs of processes running this run's fixture binary (and nothing else).
ours() {
    local exe p
    for p in /proc/[0-9]*; do
        exe=$(readlink "$p/exe" 2>/dev/null) || continue
        [[ $exe == "$daemon" ]] && echo "${p#/proc/}"
    done
    return 0
}
cleanup() {
    local left
    left=$(ours)
    # shellcheck disable=SC2086
    [[ -n $left ]] && kill -KILL $left 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

gcc -O2 -g -fomit-frame-pointer -o "$daemon" fixtures/native/scratch_daemon.c
began=$(date +%s.%N)
for i in $(seq 1 "$N"); do
    s="$tmp/s$i"
    mkdir "$s"
    t0=$(date +%s.%N)
    rc=0
    SCRATCH_DAEMON_SOCKET="$s/d.sock" nice -n 10 ./target/release/leakwatch run -n "$RUNS" \
        --settle 100ms --timeout 60s --quiet --exit-zero --native-sites \
        --native-interval "$INTERVAL" --out "$s/out" -- "$daemon" client \
        >/dev/null 2>"$s/stderr" || rc=$?
    t1=$(date +%s.%N)
    left=$(ours)
    if [[ -n $left ]]; then
        echo "$left" | tr '\n' ' ' >"$s/left"
        # shellcheck disable=SC2086
        kill -KILL $left 2>/dev/null || true
    fi
    vrc=0
    if [[ -f $s/out/samples.csv ]]; then
        nice -n 10 ./target/release/examples/site-verdicts "$s/out" >"$s/verdicts.tsv" \
            2>>"$s/stderr" || vrc=$?
    fi
    echo "$rc $vrc $t0 $t1" >"$s/status"
    rm -f "$s"/out/*.png "$s"/out/*.svg "$s"/out/report.html
    printf '.' >&2
done
echo >&2
ended=$(date +%s.%N)

python3 - "$tmp" "$N" "$INTERVAL" "$RUNS" "$KEEP" fixtures/native/scratch_daemon.c "$began" "$ended" <<'PY'
import collections, json, math, os, re, shutil, sys

tmp, n, interval, runs, keep, fixture = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
wall = float(sys.argv[8]) - float(sys.argv[7])
# The fixture's site list: X(KIND, name, a, b).
sites = re.findall(r"X\((\w+), (scratch_\w+),", open(fixture).read())
kind_of = dict((name, kind) for kind, name in sites)
controls = {"leak_state_16k": 1 << 20, "leak_small_entries": 256 << 10}
MiB = 1 << 20

def fn(site):
    return site.split(" (", 1)[0]

def upper95(k, n):
    """Exact one-sided 95% upper bound of a binomial share (Clopper-Pearson):
    the p at which P(X <= k) = 0.05, by bisection."""
    if n == 0:
        return 1.0
    def cdf(p):
        if p <= 0:
            return 1.0
        if p >= 1:
            return 0.0 if k < n else 1.0
        return sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                            + i * math.log(p) + (n - i) * math.log1p(-p)) for i in range(k + 1))
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) > 0.05 else (lo, mid)
    return hi

verdicts = collections.Counter()
decisive = collections.Counter()  # sites with >= 5 points
by_kind = collections.defaultdict(collections.Counter)
never_sampled = collections.Counter()
false_leaks, failed, times = [], [], []
ctl = {c: {"verdicts": collections.Counter(), "errors": [], "covered": 0, "n": 0} for c in controls}
judged = 0
for i in range(1, n + 1):
    s = f"{tmp}/s{i}"
    rc, vrc, t0, t1 = open(f"{s}/status").read().split()
    times.append(float(t1) - float(t0))
    why = []
    if rc != "0":
        why.append(f"leakwatch exit {rc}: {open(f'{s}/stderr').read().strip()[-300:]}")
    if os.path.exists(f"{s}/left"):
        why.append(f"left running, killed: {open(f'{s}/left').read().strip()}")
    summary = None
    try:
        summary = json.load(open(f"{s}/out/summary.json"))
    except (OSError, ValueError) as e:
        why.append(f"no summary.json ({e})")
    if summary and summary.get("failed_runs"):
        why.append(f"failed runs: {summary['failed_runs']}")
    if vrc != "0":
        why.append(f"site-verdicts exit {vrc}")
    rows = []
    if os.path.exists(f"{s}/verdicts.tsv"):
        for line in open(f"{s}/verdicts.tsv"):
            scope, source, site, points, verdict, rate, lo, hi, listed, reason = line.rstrip("\n").split("\t")
            if scope == "survivors" and source == "Native":
                rows.append((site, int(points), verdict, rate, lo, hi, reason))
    listed = {x["site"]: x for x in (summary or {}).get("native_sites", [])}
    seen = set()
    leaked_here = False
    for site, points, verdict, rate, lo, hi, reason in rows:
        name = fn(site)
        if name not in kind_of:
            continue
        seen.add(name)
        judged += 1
        verdicts[verdict] += 1
        by_kind[kind_of[name]][verdict] += 1
        if points >= 5:
            decisive[verdict] += 1
        if verdict == "leak" or listed.get(site, {}).get("verdict") == "leak":
            leaked_here = True
            x = listed.get(site, {})
            end = x.get("end_rate") or {"rate": rate, "ci95": (lo, hi)}
            false_leaks.append((i, name, end["rate"], end["ci95"], x.get("reason", reason)))
    for name in kind_of:
        if name not in seen:
            never_sampled[kind_of[name]] += 1
    for c, truth in controls.items():
        x = next((v for k, v in listed.items() if fn(k) == c), None)
        d = ctl[c]
        d["n"] += 1
        d["verdicts"][x["verdict"] if x else "not listed"] += 1
        if x and x.get("end_rate"):
            d["errors"].append((x["end_rate"]["rate"] - truth) / truth)
            lo, hi = x["end_rate"]["ci95"]
            d["covered"] += lo <= truth <= hi
    if why:
        failed.append((i, why))
    if keep and (why or leaked_here):
        shutil.copytree(s, f"{keep}/{interval}-s{i}", dirs_exist_ok=True)

print(f"# native_false_leaks: {n} sessions of `run -n {runs} --native-sites --native-interval {interval}`, "
      f"{len(kind_of)} scratch sites each")
print(f"time per session: leakwatch run mean {sum(times) / len(times):.2f} s, max {max(times):.2f} s; "
      f"with the judging of every site {wall / n:.2f} s ({wall / 60:.1f} min in all)")
k = len(false_leaks)
print(f"scratch-site judgements: {judged} ({', '.join(f'{v} {c}' for v, c in verdicts.most_common())})")
nd = sum(decisive.values())
print(f"  with >= 5 points (could be called a leak at all): {nd} ({', '.join(f'{v} {c}' for v, c in decisive.most_common())})")
print(f"false leaks: {k} of {judged} = {100 * k / max(judged, 1):.3f}%, "
      f"95% upper bound {100 * upper95(k, judged):.3f}%"
      + (f"; of the {nd} with >= 5 points: {100 * upper95(k, nd):.3f}%" if nd else ""))
for i, name, rate, ci, reason in false_leaks:
    lo, hi = ci if ci else (None, None)
    print(f"  session {i}: {name} {float(rate):+.0f} B/run, CI {lo} .. {hi}: {reason}")
print("by kind (judged: verdicts; never sampled in a session):")
for kind in dict.fromkeys(kind_of.values()):
    c = by_kind[kind]
    print(f"  {kind:15} {sum(c.values()):6}: " + ", ".join(f"{v} {m}" for v, m in c.most_common())
          + f"; never sampled {never_sampled[kind]}")
print(f"scratch sites never sampled (absent from the session): {sum(never_sampled.values())} "
      f"of {n * len(kind_of)}")
for c, truth in controls.items():
    d = ctl[c]
    e = d["errors"]
    if e:
        mean = sum(e) / len(e)
        sd = (sum((x - mean) ** 2 for x in e) / max(len(e) - 1, 1)) ** 0.5
        within = sum(abs(x) <= 0.25 for x in e)
        stats = (f"rate mean error {100 * mean:+.1f}%, sd {100 * sd:.1f}%, within 25% {within}/{len(e)}, "
                 f"CI covers the truth {d['covered']}/{len(e)}")
    else:
        stats = "no rate"
    print(f"control {c} (truth {truth / 1024:.0f} KiB/run): "
          + ", ".join(f"{v} {m}" for v, m in d["verdicts"].most_common()) + f"; {stats}")
print(f"sessions failed: {len(failed)}")
for i, why in failed:
    print(f"  session {i}: " + "; ".join(why))
PY
