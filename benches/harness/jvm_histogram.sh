#!/usr/bin/env bash
# The pause `--jvm-classes` costs a JVM: one class histogram (a full
# collection and a heap walk) on a 512 MiB heap holding LIVE_MIB of small
# objects, as leakwatch measures it (its note: the longest answer) and as
# the JVM's own safepoint log has it, beside `jcmd PID GC.class_histogram`
# timed from outside, in the same run.
#
#     bash benches/harness/jvm_histogram.sh [LIVE_MIB]    # default 300
#
# Needs java, javac, jcmd and a built target/release/leakwatch.
set -euo pipefail
live_mib=${1:-300}
repo=$(cd "$(dirname "$0")/../.." && pwd)
lw="$repo/target/release/leakwatch"
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
javac -d "$work" "$repo/fixtures/real/runtimes/ClassKeeper.java"
port=$((20000 + RANDOM % 20000))
# A session is ~72 bytes with its String and byte[]: LIVE_MIB in 20 requests.
per=$((live_mib * 1048576 / 72 / 20))
java -XX:+UseG1GC -Xms512m -Xmx512m -Xlog:safepoint:file="$work/safepoint.log" \
    -cp "$work" ClassKeeper "$port" "$per" 0 >"$work/out.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q ready "$work/out.log" 2>/dev/null && break; sleep 0.1; done
python3 "$repo/fixtures/real/runtimes/client.py" --port "$port" --count 20
echo "sessions kept: $(python3 "$repo/fixtures/real/runtimes/client.py" --port "$port" --truth)"
"$lw" attach "$pid" --jvm-classes --duration 20s --quiet --out "$work/session" >/dev/null || true
grep -o -- '--jvm-classes: [^"]*' "$work/session/summary.json" | head -2
for i in 1 2 3; do
    start=$(date +%s%N)
    jcmd "$pid" GC.class_histogram >/dev/null
    echo "jcmd GC.class_histogram wall: $(( ($(date +%s%N) - start) / 1000000 )) ms"
done
echo "JVM safepoints of the histograms (HeapInspection / GC_HeapInspection), ms:"
grep -E "HeapInspection" "$work/safepoint.log" \
    | sed -E 's/.*Total: ([0-9]+) ns.*/\1/' | awk '{ printf "  %.1f\n", $1 / 1e6 }'
