#!/usr/bin/env bash
# The main job: a small real tuning study on the CPU engine with the tiny generated model, the
# confirm step (the best config and the baseline re-measured in alternating rounds), then the
# Pareto table and the exported `vllm serve --config` YAML.
#
# The question it answers is one a production user asks: at 32 requests in flight, which
# configuration streams tokens at least 20% faster than vLLM's defaults (p90 TPOT at most 0.8x
# the baseline's), with a first token at most 3x later (p90 TTFT), at the most output
# throughput, and what does that cost against the defaults? The defaults miss that TPOT bound
# by construction, so there is something to decide on any host: a config that holds it, and
# its price as an interval, or "no config met the SLOs" (exit 3: the closest one is exported,
# marked INFEASIBLE in its header). The bounds are relative to what the baseline measures on
# this host, so they hold on a slow host as on a fast one. They are p90s: each trial's batches
# go on until its p90s rest on 100 requests or more (a p99 needs 1,000: minutes a trial on 2
# cores), and its rate is measured to +-10% within 40 s of batches; the confirm step
# re-measures the best config beside the defaults in at most 4 rounds, stopping as soon as its
# sequential interval decides.
#
# Every setting can be changed from the environment (the tests run this script on the fake
# engine with a slow step, and on the real engine with a smaller workload):
#   STUDY TRIALS CONFIRM ROUNDS MODEL ROOT SPACE WORKLOAD CONCURRENCY SEED ENGINE_COMMAND AUTOTUNE
#   PRECISION SLOS (space-separated --slo values)
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
EXTRA+=(--precision "${PRECISION:-throughput=0.1,max_s=40}")
read -ra SLO_LIST <<< "${SLOS:-p90_tpot_ms=baseline*0.8 p90_ttft_ms=baseline*3}"
for slo in "${SLO_LIST[@]}"; do EXTRA+=(--slo "$slo"); done

[ -f "$MODEL/config.json" ] || "${AT[@]}" make-tiny-model "$MODEL"
rc=0
"${AT[@]}" tune --model "$MODEL" --space "$SPACE" --root "$ROOT" \
    --workload "$WORKLOAD" --concurrency "${CONCURRENCY:-32}" \
    --objective output_throughput:max --objective p90_ttft_ms:min --objective p90_tpot_ms:min \
    --trials "$TRIALS" --study "$STUDY" --confirm "${CONFIRM:-1}" --confirm-rounds "${ROUNDS:-4}" \
    "${EXTRA[@]}" || rc=$?
ALLOW=()
case $rc in
    0) ;;
    3) ALLOW=(--allow-infeasible) ;;  # nothing met the SLOs: export the closest, marked so
    *) exit "$rc" ;;
esac
# The confirmed winner (or the best of the front when the confirm step crowned none).
"${AT[@]}" export "$STUDY" --root "$ROOT" -o "$ROOT/$STUDY/best.yaml" "${ALLOW[@]}"
echo "--- $ROOT/$STUDY/best.yaml"
cat "$ROOT/$STUDY/best.yaml"
if [ -f "$ROOT/$STUDY/best.env" ]; then echo "--- $ROOT/$STUDY/best.env"; cat "$ROOT/$STUDY/best.env"; fi
