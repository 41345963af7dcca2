#!/usr/bin/env bash
# leakwatch watching itself: one leakwatch attached at 100 ms to a pool of
# 200 processes that fork and exit (workers recycled, a few per second), and
# a second leakwatch attached to the first, judging its RSS and open fds.
# Prints both verdicts and the first one's figures.
#
# Usage: bash benches/harness/self_watch.sh            (30 minutes, needs a release
#        build: cargo build --release)
#        LEAKWATCH_TEST_DURATION=300 LEAKWATCH_TEST_WORKERS=50 bash benches/harness/self_watch.sh
#        (a shorter run)
# Environment: LEAKWATCH_TEST_BIN (binary, default target/release/leakwatch),
#        LEAKWATCH_TEST_DURATION (seconds, 1800), LEAKWATCH_TEST_WORKERS (200),
#        LEAKWATCH_TEST_WORKER_LIFE (mean worker life in seconds, 60: workers/life
#        recycles per second), LEAKWATCH_TEST_OUT (output directory).
set -euo pipefail
cd "$(dirname "$0")/../.."
LW=${LEAKWATCH_TEST_BIN:-target/release/leakwatch}
DURATION=${LEAKWATCH_TEST_DURATION:-1800}
WORKERS=${LEAKWATCH_TEST_WORKERS:-200}
LIFE=${LEAKWATCH_TEST_WORKER_LIFE:-60}
OUT=${LEAKWATCH_TEST_OUT:-$(mktemp -d /tmp/self-watch.XXXXXX)}
mkdir -p "$OUT"
[ -x "$LW" ] || { echo "no $LW: run cargo build --release" >&2; exit 2; }
# A copy, so that a rebuild during the session does not change what runs.
cp "$LW" "$OUT/leakwatch"
LW=$OUT/leakwatch

# The pool: a master forking WORKERS sleeping children, each living
# LIFE * U(0.5, 1.5) seconds, replaced as soon as it exits.
python3 - "$WORKERS" "$LIFE" <<'EOF' &
import os, random, signal, sys, time
workers, life = int(sys.argv[1]), float(sys.argv[2])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
children = set()
def spawn():
    pid = os.fork()
    if pid == 0:
        time.sleep(life * random.uniform(0.5, 1.5))
        os._exit(0)
    children.add(pid)
try:
    for _ in range(workers):
        spawn()
        time.sleep(life / workers / 4)
    while True:
        pid, _ = os.wait()
        children.discard(pid)
        spawn()
finally:
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
EOF
POOL=$!
trap 'kill "$POOL" 2>/dev/null || true; [ -z "${INNER:-}" ] || kill "$INNER" 2>/dev/null || true' EXIT
# The pool full first (its start-up is not leakwatch's growth).
sleep "$(( ${LIFE%.*} / 4 + 5 ))"

"$LW" attach "$POOL" --interval 100ms --duration "${DURATION}s" --quiet \
    --out "$OUT/inner" 2>"$OUT/inner.stderr" &
INNER=$!
sleep 10
# The watcher judges the sampling phase: it ends before the watched
# leakwatch analyses its samples and writes its reports.
"$LW" attach "$INNER" --interval 1s --duration "$(( DURATION - 15 ))s" --quiet \
    --out "$OUT/outer" 2>"$OUT/outer.stderr" || true
# The peak of the report phase, read until the watched leakwatch exits.
HWM=0
while [ -r "/proc/$INNER/status" ]; do
    HWM=$(awk '/^VmHWM/ {print $2}' "/proc/$INNER/status" 2>/dev/null || echo "$HWM")
    sleep 0.2
done
wait "$INNER" || true
echo "inner peak RSS (VmHWM, sampling and reports): $(( ${HWM:-0} / 1024 )) MiB" > "$OUT/inner.hwm"
kill "$POOL" 2>/dev/null || true
wait "$POOL" 2>/dev/null || true

python3 - "$OUT" <<'EOF'
import csv, json, sys
out = sys.argv[1]
outer = json.load(open(f"{out}/outer/summary.json"))
inner = json.load(open(f"{out}/inner/summary.json"))
print(f"output: {out}")
print(open(f"{out}/inner.hwm").read().strip())
print(f"inner (attach to the pool): verdict {inner['verdict']}, "
      f"samples.csv {sum(1 for _ in open(f'{out}/inner/samples.csv')) - 1} rows")
rows = [r for r in csv.DictReader(open(f"{out}/outer/samples.csv"))
        if r["tier"] in ("cheap", "deep") and r["rss_bytes"]]
rss = [int(r["rss_bytes"]) for r in rows]
fds = [int(r["fds"]) for r in rows if r["fds"]]
print(f"outer (watching the inner leakwatch): verdict {outer['verdict']}, {len(rows)} samples")
print(f"  inner RSS first {rss[0]/2**20:.1f} MiB, last {rss[-1]/2**20:.1f} MiB, "
      f"max {max(rss)/2**20:.1f} MiB")
print(f"  inner fds first {fds[0]}, last {fds[-1]}, min {min(fds)}, max {max(fds)}")
for s in outer["series"]:
    if s["name"] == "target" and s["metric"] in ("rss_bytes", "pss_bytes", "uss_bytes", "anon_bytes", "fds"):
        line = s.get("line") or {}
        print(f"  target {s['metric']}: verdict {s['verdict']}, slope {line.get('slope', 0):.4g}/s "
              f"(= {line.get('slope', 0)*3600:.4g}/h), ci95 {line.get('ci95')}")
EOF
