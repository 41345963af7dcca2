#!/usr/bin/env bash
# Accuracy of `run --native-sites` over repeats: the C fixture daemon keeps
# LEAK bytes per request in keep_request_state() and replaces 4 MiB of
# scratch buffers per request; each repeat is one `leakwatch run -n 10`.
# Prints per repeat the leaking site's rate and CI, then: how many named the
# right function first, were within 25% of the truth, had a CI covering it,
# and how many called the scratch site a leak.
# Usage: bash benches/harness/native_accuracy.sh [REPEATS=30] [LEAK=1048576] [INTERVAL=64KiB]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-30}
LEAK=${2:-1048576}
INTERVAL=${3:-64KiB}
cargo build --release --quiet
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -g -fomit-frame-pointer -o "$tmp/leaky_daemon" fixtures/native/leaky_daemon.c
for i in $(seq 1 "$N"); do
    LEAKY_DAEMON_SOCKET="$tmp/d$i.sock" ./target/release/leakwatch run -n 10 --settle 100ms \
        --quiet --exit-zero --native-sites --native-interval "$INTERVAL" --out "$tmp/out$i" \
        -- "$tmp/leaky_daemon" client --leak "$LEAK" --churn 4194304 >/dev/null 2>&1 || true
done
python3 - "$tmp" "$N" "$LEAK" <<'PY'
import json, sys
tmp, n, leak = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
first = within = covered = scratch_leaks = 0
errors = []
for i in range(1, n + 1):
    sites = json.load(open(f"{tmp}/out{i}/summary.json")).get("native_sites", [])
    k = next((s for s in sites if s["site"].startswith("keep_request_state (")), None)
    b = next((s for s in sites if s["site"].startswith("build_scratch_buffers (")), None)
    if sites and sites[0] is k:
        first += 1
    if k and k.get("end_rate"):
        rate, (lo, hi) = k["end_rate"]["rate"], k["end_rate"]["ci95"]
        err = (rate - leak) / leak
        errors.append(err)
        within += abs(err) <= 0.25
        covered += lo <= leak <= hi
        print(f"repeat {i}: {rate:.0f} B/run ({100 * err:+.1f}%), CI {lo:.0f} .. {hi:.0f}")
    scratch_leaks += bool(b and b["verdict"] == "leak")
mean = sum(errors) / max(len(errors), 1)
sd = (sum((e - mean) ** 2 for e in errors) / max(len(errors) - 1, 1)) ** 0.5
print(f"{n} repeats, truth {leak:.0f} B/run: named first {first}/{n}, within 25% {within}/{n}, "
      f"CI covers the truth {covered}/{n}, mean error {100 * mean:+.1f}%, sd {100 * sd:.1f}%, "
      f"scratch called a leak {scratch_leaks}/{n}")
PY
