#!/usr/bin/env bash
# The real-runtime verdicts, 5 tries of 5: every real-runtime case of
# tests/real_runtimes.rs (Node, JVM G1, CPython, glibc threads, redis; keeping
# and dropping; `run` of 20 and `attach` of 60 s each) and the PostgreSQL
# backend of tests/real_verdicts.rs, TRIES times each, every try its own test
# process, so that one failure does not stop the tries after it
# (LEAKWATCH_TEST_RUNTIME_TRIES=5 stops at the first).
#
# Prints each try's figures as the tests print them (verdict, rate, anon
# growth, the runtime's own), then per case how many tries passed. The
# release build; the servers are the ones .ci/deps installs. Each try's output
# directories are kept in KEEP/<runtime>-<mode>-<try>/
# (LEAKWATCH_TEST_KEEP_SAMPLES) to replay a failure with `leakwatch report`.
#
# Usage: bash benches/harness/real_runtimes.sh [TRIES=5] [KEEP=/tmp/real-runtimes] [FILTER]
# FILTER: a substring of the test names (e.g. node, postgres).
set -euo pipefail
cd "$(dirname "$0")/../.."
TRIES=${1:-5}
KEEP=${2:-/tmp/real-runtimes}
FILTER=${3:-}
mkdir -p "$KEEP"
# The real-software tests are built to run (build.rs's lw_deps), not listed as ignored.
export LEAKWATCH_DEPS=1
cargo test --release --quiet --no-run --test real_runtimes --test real_verdicts 2>/dev/null
bin() {
    cargo test --release --no-run --test "$1" --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])'
}
RUNTIMES=$(bin real_runtimes)
VERDICTS=$(bin real_verdicts)
cases() {
    "$RUNTIMES" --list 2>/dev/null | sed -n 's/: test$//p' | sed "s|^|$RUNTIMES |"
    "$VERDICTS" --list 2>/dev/null | sed -n 's/: test$//p' | grep postgres | sed "s|^|$VERDICTS |"
}
declare -A passed
order=()
while read -r exe name; do
    [[ -n "$FILTER" && "$name" != *"$FILTER"* ]] && continue
    order+=("$name")
    passed[$name]=0
done < <(cases)
for try in $(seq 1 "$TRIES"); do
    while read -r exe name; do
        [[ -n "$FILTER" && "$name" != *"$FILTER"* ]] && continue
        log="$KEEP/$name.$try.log"
        if CI=true LEAKWATCH_TEST_KEEP_SAMPLES="$KEEP/try$try" \
            "$exe" --exact "$name" --nocapture >"$log" 2>&1; then
            passed[$name]=$((passed[$name] + 1))
            result=pass
        else
            result=FAIL
        fi
        echo "try $try $name: $result"
        grep -E "^(Node|Jvm|CPython|Glibc|Redis|postgres)|panicked|assert" "$log" | sed 's/^/    /' || true
    done < <(cases)
done
echo
echo "| case | passed |"
echo "|---|---|"
for name in "${order[@]}"; do
    echo "| $name | ${passed[$name]} of $TRIES |"
done
