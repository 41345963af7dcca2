#!/usr/bin/env bash
# What `run --js-sites` costs a Node program: an allocation-heavy loop
# (objects and strings made and dropped, one in 64 kept a while in a ring)
# timed alone and with leakwatch's preload running V8's sampling heap
# profiler at each INTERVAL (bytes; leakwatch's default is 131072), and
# with the preload alone (no profiler); medians of ROUNDS interleaved
# rounds, as ratios to the loop's own time measured in the same rounds.
#
#     bash benches/harness/js_sites_cost.sh [ROUNDS [INTERVAL...]]
#     # default: 9 rounds; 32768 131072 524288
set -euo pipefail
rounds=${1:-9}
shift || true
intervals=("$@")
[ ${#intervals[@]} -gt 0 ] || intervals=(32768 131072 524288)
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$repo/src/sample/heap/node_preload.js" "$work/preload.js"
mkdir -m 700 "$work/d"
cat >"$work/loop.js" <<'JS'
const ring = new Array(4096);
let sum = 0;
const t0 = process.hrtime.bigint();
for (let i = 0; i < 2e7; i++) {
  const o = { id: i, name: 'item' + (i & 1023), tags: [i & 7, i & 15] };
  if ((i & 63) === 0) ring[(i >> 6) & 4095] = o;
  sum += o.tags.length;
}
const ms = Number(process.hrtime.bigint() - t0) / 1e6;
console.log(ms.toFixed(1));
if (sum < 0) console.log(sum);
JS
run() { node "$@" "$work/loop.js"; }
declare -A times
for _ in $(seq "$rounds"); do
    times[alone]+=" $(run)"
    times[preload]+=" $(LEAKWATCH_NODE_DIR="$work/d" run --require "$work/preload.js")"
    for iv in "${intervals[@]}"; do
        times[$iv]+=" $(LEAKWATCH_NODE_DIR="$work/d" LEAKWATCH_NODE_SITES="$iv" run --require "$work/preload.js")"
    done
done
median() { printf '%s\n' $1 | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
a=$(median "${times[alone]}")
echo "loop alone: ${a} ms (median of $rounds rounds)"
for k in preload "${intervals[@]}"; do
    m=$(median "${times[$k]}")
    echo "$k: ${m} ms, $(awk -v x="$m" -v y="$a" 'BEGIN { printf "%.3f", x / y }')x"
done
