#!/usr/bin/env bash
# The tuner's CUDA device path on a real GPU, for hosts with torch but no vLLM (see
# scripts/gpu_check.py): real nvidia-smi parsing, a real torch OOM classified as oom, memory
# released before the next lease, CUDA_VISIBLE_DEVICES honoured. Findings go to one folder
# (default: gpu-check/); the whole check is cut off at 10 minutes.
#   bash scripts/gpu-check.sh [OUT]
# Uses .venv's python where there is one, else python3 (which needs torch with CUDA and this
# package's dependencies: pip install -e .).
set -uo pipefail
cd "$(dirname "$0")/.."
python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python
exec timeout 600 "$python" scripts/gpu_check.py "$@"
