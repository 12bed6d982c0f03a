#!/usr/bin/env bash
# The main job: a small real tuning study on the CPU engine with the tiny generated model, the
# confirm step (the best config and the baseline re-measured in alternating rounds: on this
# host the CPU defaults are within a few % of the best, and the demo says whether the gain is
# significant), then the Pareto table and the exported `vllm serve --config` YAML.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
AT=(.venv/bin/autotune)
STUDY=${STUDY:-demo}
TRIALS=${TRIALS:-6}

[ -f models/tiny/config.json ] || "${AT[@]}" make-tiny-model models/tiny
"${AT[@]}" tune --model ./models/tiny --space search_spaces/cpu.yaml \
    --workload random:input=256,output=64,prompts=64 --concurrency 32 \
    --slo p99_ttft_ms=2000 --slo p99_tpot_ms=200 --trials "$TRIALS" --study "$STUDY" \
    --confirm "${CONFIRM:-1}" --confirm-rounds "${ROUNDS:-3}"
"${AT[@]}" show "$STUDY"
"${AT[@]}" export "$STUDY" -o "studies/$STUDY/best.yaml"  # the confirmed winner
echo "--- studies/$STUDY/best.yaml"
cat "studies/$STUDY/best.yaml"
if [ -f "studies/$STUDY/best.env" ]; then echo "--- studies/$STUDY/best.env"; cat "studies/$STUDY/best.env"; fi
