"""Which graph-mode options the installed vllm-ascend accepts.

vllm-ascend changed its graph modes in late 2025: the torchair path
(`additional_config.torchair_graph_config`) was removed, and ACLGraph, set through vLLM's
`compilation_config.cudagraph_mode`, gained modes release by release. A search space must match
the installed version, so its options are checked here before any engine starts.

The boundaries come from vllm-ascend's release notes (docs/source/user_guide/release_notes.md):

- torchair: v0.12.0rc1 (2025-12-13) says "Torchair graph mode is removed.
  `--additional-config {"torchair_graph_config": {"enabled": true}}` doesn't work anymore"
  (PR #4814 "Drop torchair", merged 2025-12-09); v0.11.0's notes (2025-12-16, its own branch)
  say "it'll be removed in v0.12.0rc1", and v0.11.0 is the last release that has it.
- The Ascend scheduler (`additional_config.ascend_scheduler_config`): PR #4623 "Drop ascend
  scheduler" (merged 2025-12-02, on vLLM 0.12.0) removed it, so from v0.12.0rc1 the key does
  nothing and vLLM's own scheduler options (max_num_batched_tokens, enable_chunked_prefill)
  are the knobs; a trial that sets it would measure the default under the knob's label.
- NONE, PIECEWISE: vLLM's `CUDAGraphMode` is documented from vLLM v0.10.2, which
  vllm-ascend v0.10.2rc1 is the first release to build on.
- FULL_DECODE_ONLY: v0.11.0rc1 "[Experimental] Graph mode `FULL_DECODE_ONLY` is supported now!
  And `FULL` will be landing in the next few weeks."
- FULL: vllm-ascend PR #3970 "support FULL graph mode for GQA" (opened 2025-11-04); v0.12.0rc1
  is the first release after it whose notes we could confirm, so older ones are refused.
- FULL_AND_PIECEWISE: v0.21.0rc1 "FULL_AND_PIECEWISE Graph Mode: Introduced"; older versions
  quietly ran it as PIECEWISE (PR #9174), which would measure a mislabelled config.
- `additional_config` keys that replace `VLLM_ASCEND_*` variables: PR #9064 migrated ten of
  them (docs/source/user_guide/configuration/additional_config.md, "Migration Guide"; the
  variables stay as deprecated aliases). The earliest documentation branch that lists the keys
  is releases-v0.20.2rc, so the keys are accepted from 0.20.2rc1; an older release reads only
  the variable, and an unknown key of `additional_config` would be ignored there: the trial
  would measure the default while labelled with the knob.
- `additional_config.eplb_config` (vllm-ascend's own EPLB: `dynamic_eplb`,
  `num_redundant_experts`, ...): PR #5533 "Eplb Config Renaming" (2026-01-15) moved the keys
  there from the top of `additional_config`; v0.14.0rc1 is the first release that has it. An
  older release ignores the dict, so a trial would measure no EPLB labelled with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version  # an optuna dependency

from autotune.devices import installed_version

# The wheel is `vllm_ascend`, the project `vllm-ascend`; metadata lookups differ by Python.
ASCEND_DISTRIBUTIONS = ("vllm-ascend", "vllm_ascend")

TORCHAIR_REMOVED_IN = Version("0.12.0rc1")

# cudagraph_mode value -> the first vllm-ascend release that runs it as asked.
CUDAGRAPH_MODE_SINCE: dict[str, Version] = {
    "NONE": Version("0.10.2rc1"),
    "PIECEWISE": Version("0.10.2rc1"),
    "FULL_DECODE_ONLY": Version("0.11.0rc1"),
    "FULL": Version("0.12.0rc1"),
    "FULL_AND_PIECEWISE": Version("0.21.0rc1"),
}

# additional_config key -> the variable it replaced (PR #9064), accepted from ADDITIONAL_SINCE.
ADDITIONAL_CONFIG_FROM_ENV: dict[str, str] = {
    "enable_balance_scheduling": "VLLM_ASCEND_BALANCE_SCHEDULING",
    "enable_flashcomm1": "VLLM_ASCEND_ENABLE_FLASHCOMM1",
    "enable_matmul_allreduce": "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE",
    "enable_flashcomm2_parallel_size": "VLLM_ASCEND_FLASHCOMM2_PARALLEL_SIZE",
    "msmonitor_use_daemon": "MSMONITOR_USE_DAEMON",
    "enable_mlapo": "VLLM_ASCEND_ENABLE_MLAPO",
    "weight_nz_mode": "VLLM_ASCEND_ENABLE_NZ",
    "enable_context_parallel": "VLLM_ASCEND_ENABLE_CONTEXT_PARALLEL",
    "enable_fused_mc2": "VLLM_ASCEND_ENABLE_FUSED_MC2",
    "enable_transpose_kv_cache_by_block": "VLLM_ASCEND_FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK",
}
ADDITIONAL_SINCE = Version("0.20.2rc1")
# additional_config dict -> the first vllm-ascend release that reads it.
ADDITIONAL_DICT_SINCE: dict[str, Version] = {"eplb_config": Version("0.14.0rc1")}

Problem = tuple[str, str]  # (dotted option path, message)


def installed_ascend_version() -> str | None:
    """The installed vllm-ascend version string; None when vllm-ascend is not installed."""
    return installed_version(*ASCEND_DISTRIBUTIONS)


def parse_ascend_version(text: str | None) -> Version | None:
    """A comparable version, or None for no version or one that is not PEP 440 (a source tree)."""
    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def ascend_option_problems(options: Mapping[str, Any], version: str | None) -> list[Problem]:
    """Graph-mode options that vllm-ascend `version` lacks, as `(option path, message)`.

    `options` are vLLM options by their Python names, dict options as dicts (or JSON text).
    Unknown cudagraph modes are reported whatever the version; the version-gated checks are
    skipped when `version` is None or unreadable (vllm-ascend not installed here).
    """
    installed = parse_ascend_version(version)
    problems = _cudagraph_mode_problems(options, installed)
    if installed is not None:
        problems += _removed_key_problems(options, installed)
        problems += _migrated_key_problems(options, installed)
    return problems


def _migrated_key_problems(options: Mapping[str, Any], installed: Version) -> list[Problem]:
    given = _dict_option(options, "additional_config")
    problems = [
        (
            f"additional_config.{key}",
            f"needs vllm-ascend >= {since} (installed: {installed}); older releases ignore it",
        )
        for key, since in ADDITIONAL_DICT_SINCE.items()
        if key in given and installed < since
    ]
    if installed >= ADDITIONAL_SINCE:
        return problems
    keys = sorted(set(given) & set(ADDITIONAL_CONFIG_FROM_ENV))
    return problems + [
        (
            f"additional_config.{key}",
            f"needs vllm-ascend >= {ADDITIONAL_SINCE} (installed: {installed}); this version "
            f"reads {ADDITIONAL_CONFIG_FROM_ENV[key]} instead",
        )
        for key in keys
    ]


def _dict_option(options: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A dict option as a dict; vLLM also takes JSON text, and `-O3`-style ints have no keys."""
    value = options.get(name)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


# additional_config key -> (the release that removed it, what it was, what to use instead).
REMOVED_KEYS: dict[str, tuple[Version, str, str]] = {
    "torchair_graph_config": (
        TORCHAIR_REMOVED_IN,
        "torchair graph mode",
        "use compilation_config.cudagraph_mode (ACLGraph)",
    ),
    "ascend_scheduler_config": (
        Version("0.12.0rc1"),
        "the Ascend scheduler",
        "vLLM's scheduler runs: tune max_num_batched_tokens and enable_chunked_prefill",
    ),
}


def _removed_key_problems(options: Mapping[str, Any], installed: Version) -> list[Problem]:
    """Keys of `additional_config` that the installed release no longer has."""
    given = _dict_option(options, "additional_config")
    return [
        (
            f"additional_config.{key}",
            f"{what} was removed in vllm-ascend {since} (installed: {installed}); {instead}",
        )
        for key, (since, what, instead) in REMOVED_KEYS.items()
        if key in given and installed >= since
    ]


def _cudagraph_mode_problems(
    options: Mapping[str, Any], installed: Version | None
) -> list[Problem]:
    mode = _dict_option(options, "compilation_config").get("cudagraph_mode")
    if not isinstance(mode, str):
        return []  # absent (the version's default) or an enum value vLLM checks itself
    path = "compilation_config.cudagraph_mode"
    since = CUDAGRAPH_MODE_SINCE.get(mode.upper())  # vLLM reads the name case-insensitively
    if since is None:
        known = ", ".join(CUDAGRAPH_MODE_SINCE)
        return [(path, f"unknown mode '{mode}' (vLLM's modes: {known})")]
    if installed is None or installed >= since:
        return []
    return [(path, f"{mode.upper()} needs vllm-ascend >= {since} (installed: {installed})")]
