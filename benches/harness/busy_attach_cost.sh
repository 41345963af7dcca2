#!/usr/bin/env bash
# What `attach --native-sites` costs a process that allocates without pause,
# entered busy: fixtures/native/busy_alloc.c (its main thread replaces blocks
# of 16-1008 B nonstop), with one idle thread (IDLE=1: entered from it) and
# with none (IDLE=0: entered at a call to malloc). The program's own clock
# is the measure: it logs the time of every 2^24 replacements, so the median
# seconds per 2^24 before the attach and while attached (from 2 s after
# leakwatch starts, past its entry, to its end) give the ratio, in the same
# process.
#
#   bash benches/harness/busy_attach_cost.sh          # 3 rounds per shape
#   LEAKWATCH_TEST_ROUNDS=5 bash benches/harness/busy_attach_cost.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${LEAKWATCH_TEST_ROUNDS:-3}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
cc -O2 -pthread -o "$tmp/busy_alloc" "$root/fixtures/native/busy_alloc.c"

echo "| shape | round | s per 2^24 alone | attached | ratio | entered | leak named |"
echo "|---|---|---:|---:|---:|---|---|"
for idle in 1 0; do
  for round in $(seq "$rounds"); do
    log="$tmp/log-$idle-$round"
    "$tmp/busy_alloc" "$idle" "$log" > /dev/null &
    pid=$!
    sleep 6
    start=$(date +%s.%N)
    out="$tmp/out-$idle-$round"
    "$root/target/release/leakwatch" attach --native-sites --duration 12s --exit-zero \
      --out "$out" "$pid" 2> "$tmp/err" > /dev/null
    end=$(date +%s.%N)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    entered=$(grep -o 'idle in a system call\|at its call to malloc' "$tmp/err" | head -1)
    named=$(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); n=s.get('native_sites') or [{}]; print((n[0].get('site') or '-').split(' (')[0])" "$out/summary.json")
    python3 - "$log" "$start" "$end" "$idle" "$round" "$entered" "$named" <<'EOF'
import statistics, sys
log, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
t = [float(l.split()[0]) for l in open(log) if l.strip()]
gaps = list(zip(t, t[1:]))
before = [b - a for a, b in gaps if b < start]
during = [b - a for a, b in gaps if a > start + 2 and b < end]
alone, attached = statistics.median(before), statistics.median(during)
shape = "one idle thread" if sys.argv[4] == "1" else "no idle thread"
print(f"| {shape} | {sys.argv[5]} | {alone:.3f} | {attached:.3f} | {attached / alone:.3f}x | {sys.argv[6]} | {sys.argv[7]} |")
EOF
  done
done
