#!/usr/bin/env bash
# The main job: a small real tuning study on the CPU engine with the tiny generated model, the
# confirm step (the best config and the baseline re-measured in alternating rounds), then the
# Pareto table and the exported `vllm serve --config` YAML.
#
# The SLOs are relative to what the baseline (vLLM's defaults) measures on this host: "more
# throughput, with p99 TTFT and TPOT at most 20% worse than the defaults". A fixed bound such
# as 2,000 ms holds on one host and fails on a slower one; this one holds on any host. If no
# config meets them (exit 3), the closest one is exported, marked INFEASIBLE in its header.
#
# Every setting can be changed from the environment (the tests run this script on the fake
# engine with a slow step, and on the real engine with a smaller workload):
#   STUDY TRIALS CONFIRM ROUNDS MODEL ROOT SPACE WORKLOAD CONCURRENCY SEED ENGINE_COMMAND AUTOTUNE
#   PRECISION
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
read -ra AT <<< "${AUTOTUNE:-.venv/bin/autotune}"  # a command line, e.g. "python -m autotune"
STUDY=${STUDY:-demo}
TRIALS=${TRIALS:-6}
MODEL=${MODEL:-./models/tiny}
ROOT=${ROOT:-studies}
SPACE=${SPACE:-search_spaces/cpu.yaml}
WORKLOAD=${WORKLOAD:-random:input=256,output=64,prompts=64}
EXTRA=()
if [ -n "${ENGINE_COMMAND:-}" ]; then EXTRA+=(--engine-command "$ENGINE_COMMAND"); fi
if [ -n "${SEED:-}" ]; then EXTRA+=(--seed "$SEED"); fi
if [ -n "${PRECISION:-}" ]; then EXTRA+=(--precision "$PRECISION"); fi

[ -f "$MODEL/config.json" ] || "${AT[@]}" make-tiny-model "$MODEL"
rc=0
"${AT[@]}" tune --model "$MODEL" --space "$SPACE" --root "$ROOT" \
    --workload "$WORKLOAD" --concurrency "${CONCURRENCY:-32}" \
    --slo 'p99_ttft_ms=baseline*1.2' --slo 'p99_tpot_ms=baseline*1.2' \
    --trials "$TRIALS" --study "$STUDY" --confirm "${CONFIRM:-1}" --confirm-rounds "${ROUNDS:-3}" \
    "${EXTRA[@]}" || rc=$?
ALLOW=()
case $rc in
    0) ;;
    3) ALLOW=(--allow-infeasible) ;;  # nothing met the SLOs: export the closest, marked so
    *) exit "$rc" ;;
esac
"${AT[@]}" show "$STUDY" --root "$ROOT"
# The confirmed winner (or the best of the front when the confirm step crowned none).
"${AT[@]}" export "$STUDY" --root "$ROOT" -o "$ROOT/$STUDY/best.yaml" "${ALLOW[@]}"
echo "--- $ROOT/$STUDY/best.yaml"
cat "$ROOT/$STUDY/best.yaml"
if [ -f "$ROOT/$STUDY/best.env" ]; then echo "--- $ROOT/$STUDY/best.env"; cat "$ROOT/$STUDY/best.env"; fi
