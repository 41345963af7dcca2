#!/usr/bin/env bash
# What `attach --py-sites` costs a running Python process: the time gdb
# holds it stopped (leakwatch's note, attach to detach) and the longest
# stall the program itself sees (a loop that sleeps 1 ms and records its
# longest gap between two turns, as its own clock has it), for heaps of
# OBJECTS live objects (the bootstrap counts them once, holding the GIL),
# on an idle process and on a busy one (no thread idle: the bootstrap is
# queued at a call to malloc). ROUNDS rounds each; medians printed.
#
#     bash benches/harness/py_attach_pause.sh [ROUNDS]    # default 3
#
# Needs gdb, python3 (LEAKWATCH_TEST_PYTHON names another interpreter,
# default /usr/bin/python3) and a built target/release/leakwatch.
set -euo pipefail
rounds=${1:-3}
repo=$(cd "$(dirname "$0")/../.." && pwd)
lw="$repo/target/release/leakwatch"
python=${LEAKWATCH_TEST_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
cat >"$work/stall.py" <<'PY'
import sys, time
objects = [[i] for i in range(int(sys.argv[1]))]
busy = sys.argv[2] == "busy"
out = open(sys.argv[3], "w", buffering=1)
worst, last = 0.0, time.monotonic()
print("ready", flush=True)
while True:
    if busy:
        x = [bytearray(600) for _ in range(50)]
    else:
        time.sleep(0.001)
    now = time.monotonic()
    if now - last > worst:
        worst = now - last
        out.write("%.1f\n" % (worst * 1000))
    last = now
PY
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
printf "%-6s %10s  %18s  %18s\n" shape objects "gdb stop (ms)" "program stall (ms)"
for shape in idle busy; do
    for objects in 0 1000000 5000000; do
        stops=() stalls=()
        for _ in $(seq "$rounds"); do
            "$python" "$work/stall.py" "$objects" "$shape" "$work/worst" >"$work/out" &
            pid=$!
            for _ in $(seq 300); do grep -q ready "$work/out" 2>/dev/null && break; sleep 0.1; done
            sleep 1
            before=$(tail -1 "$work/worst")
            rm -rf "$work/session"
            "$lw" attach "$pid" --py-sites --duration 2s --quiet --out "$work/session" \
                >/dev/null 2>"$work/err" || true
            stop=$(grep -o 'was stopped [0-9]* ms' "$work/session/summary.json" | head -1 | tr -dc 0-9)
            stall=$(tail -1 "$work/worst")
            kill "$pid"; wait "$pid" 2>/dev/null || true
            [ "$stall" = "$before" ] && stall="<$before"
            stops+=("${stop:-?}") stalls+=("$stall")
        done
        printf "%-6s %10s  %18s  %18s\n" "$shape" "$objects" \
            "$(printf '%s\n' "${stops[@]}" | median)" "$(printf '%s\n' "${stalls[@]}" | tr -d '<' | median)"
    done
done
