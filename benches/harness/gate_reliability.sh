#!/usr/bin/env bash
# Gate reliability on real fixture daemons: N consecutive gated runs of each
# scenario, counting exit codes. The gate must never cry wolf and never miss.
#   steady daemon,             --max-growth 64KiB/run -> expect pass (0) every time
#   leak 256 KiB/run,          --max-growth 2MiB/run  -> expect pass (0) every time
#   leak 4 MiB/run,            --max-growth 1MiB/run  -> expect fail (1) every time
# Usage: bash benches/harness/gate_reliability.sh [N=30]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-30}
cargo build --release --quiet --bins --examples
LW=./target/release/leakwatch
FX=./target/release/examples/leakwatch-fixture
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

scenario() { # name leak limit expected
    local name=$1 leak=$2 limit=$3 expected=$4 pass=0 fail=0 other=0
    for i in $(seq 1 "$N"); do
        set +e
        "$LW" run -n 10 --settle 50ms --quiet --max-growth "$limit" --out "$tmp/$name-$i" \
            -- "$FX" client --leak "$leak" --socket "$tmp/$name-$i.sock" >/dev/null
        code=$?
        set -e
        case $code in 0) pass=$((pass + 1)) ;; 1) fail=$((fail + 1)) ;; *) other=$((other + 1)) ;; esac
    done
    printf '| %-28s | %-10s | %-8s | %4d | %4d | %5d |\n' "$name (leak $leak/run)" "$limit" "$expected" "$pass" "$fail" "$other"
}

echo "| scenario | limit | expected | pass | fail | error |"
echo "|---|---|---|---:|---:|---:|"
scenario steady 0 64KiB/run pass
scenario small-leak 256KiB 2MiB/run pass
scenario big-leak 4MiB 1MiB/run fail
