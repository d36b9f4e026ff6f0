#!/usr/bin/env bash
# Every test, in two tiers, for `make test`. The soak (three minutes of a paced load on a
# service of its own, judged on memory and descriptors, not on time) runs beside the
# fast tier (unit and in-process tests, no Nacos, browser or fleet), whose tests do not
# time anything either; then the tests that start Nacos, a browser or a fleet, or that
# judge how fast something recovers, run alone, one after another.
# Exits non-zero when either tier failed; the soak's output follows the fast tier's.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
SOAK=tests/reliability/test_soak.py
mkdir -p var
soak_log=var/pytest-soak.log

"$BIN/pytest" -q -p no:cacheprovider "$SOAK" > "$soak_log" 2>&1 &
soak=$!
trap 'kill "$soak" 2>/dev/null' EXIT

# Two workers: the fast tier's tests time nothing, and the soak beside it is judged on
# memory and descriptors, so the three share the two cores (5 minutes on one worker, under
# 3.5 on two).
"$BIN/pytest" -q -n 2 --ignore="$SOAK" -m "not nacos and not browser and not slow"
fast=$?
wait "$soak"
soaked=$?
trap - EXIT
echo "--- the soak, run beside the fast tier ($SOAK):"
cat "$soak_log"

"$BIN/pytest" -q --durations=30 --ignore="$SOAK" -m "nacos or browser or slow"
rest=$?
echo "tiers: fast exit $fast, soak exit $soaked, the rest exit $rest"
exit $(( fast || soaked || rest ))
