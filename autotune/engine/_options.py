"""The vocabulary of vLLM options: which names exist and how they are spelled.

The list of engine-argument names is read from vLLM 0.32's `EngineArgs` and kept as data, so
that the tuner can check a search space without importing vLLM (which imports torch).
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import logging
import re
from functools import cache
from importlib import resources
from pathlib import Path

logger = logging.getLogger(__name__)

# Options of the OpenAI server front end that `vllm serve --config` accepts besides EngineArgs.
SERVER_OPTIONS = frozenset(
    {
        "host",
        "port",
        "api_server_count",
        "disable_log_requests",
        "enable_log_requests",
        "max_log_len",
        "disable_uvicorn_access_log",
        "disable_fastapi_docs",
        "uvicorn_log_level",
        "profiler_config",
        "chat_template",
        "response_role",
        "enable_auto_tool_choice",
        "tool_call_parser",
        "reasoning_parser",
    }
)


@cache
def known_options() -> frozenset[str]:
    """All option names (snake_case) that the tuner accepts as vLLM options."""
    text = resources.files("autotune.engine").joinpath("vllm_engine_args.txt").read_text()
    names = {line.strip() for line in text.splitlines() if line.strip()}
    return frozenset(names | SERVER_OPTIONS)


def normalize_option(name: str) -> str:
    """`--max-num-seqs`, `max-num-seqs` and `max_num_seqs` all name `max_num_seqs`."""
    return name.strip().lstrip("-").replace("-", "_")


def is_known_option(name: str) -> bool:
    return normalize_option(name) in known_options()


def suggest_option(name: str) -> str | None:
    """The closest known option name, for a 'did you mean' hint."""
    matches = difflib.get_close_matches(normalize_option(name), known_options(), n=1)
    return matches[0] if matches else None


# The kind of value an option takes, for the options the tuner itself reads (its memory
# estimate, batch rules and sizing) and vLLM's common switches: a fixed value of another kind
# fails inside the tuner or the engine, so it is refused up front. Options not named here take
# what vLLM takes (a mapping for its `*_config` options, a list for `served_model_name`).
WHOLE_NUMBER_OPTIONS = frozenset(
    {
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "prefill_context_parallel_size",
        "decode_context_parallel_size",
        "api_server_count",
        "kv_cache_memory_bytes",
        "block_size",
        "max_cudagraph_capture_size",
        "num_gpu_blocks_override",
        "max_num_partial_prefills",
        "long_prefill_token_threshold",
        "seed",
    }
)
NUMBER_OPTIONS = frozenset(
    {"gpu_memory_utilization", "swap_space", "cpu_offload_gb", "kv_offloading_size"}
)
SWITCH_OPTIONS = frozenset(
    {
        "enforce_eager",
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "trust_remote_code",
        "disable_log_stats",
        "async_scheduling",
        "enable_expert_parallel",
        "enable_eplb",
        "disable_custom_all_reduce",
    }
)
# A value holding a flag of its own: `--option "max_model_len=64 --enforce-eager"`.
_FLAG_IN_VALUE = re.compile(r"(^|\s)--?[A-Za-z]")


def option_value_problem(name: str, value: object) -> str | None:
    """Why `value` cannot be option `name`'s (None where it can): a string holding another
    flag, or a value of the wrong kind for an option listed above. None (null) always can:
    it leaves vLLM's default."""
    if value is None:
        return None
    if isinstance(value, str) and _FLAG_IN_VALUE.search(value):
        return f"{value!r} holds a flag: give each vLLM option its own --option KEY=VALUE"
    whole = isinstance(value, int) and not isinstance(value, bool)
    if name in WHOLE_NUMBER_OPTIONS and not whole:
        return f"{_shown(value)} is not a whole number (e.g. {name}=1024)"
    if name in NUMBER_OPTIONS and not (whole or isinstance(value, float)):
        return f"{_shown(value)} is not a number"
    if name in SWITCH_OPTIONS and not isinstance(value, bool):
        return f"{_shown(value)} is not true or false"
    return None


def _shown(value: object) -> str:
    return f"a {type(value).__name__}" if isinstance(value, dict | list) else repr(value)


def cli_flag(name: str) -> str:
    """The command-line spelling of an option: `max_num_seqs` -> `--max-num-seqs`."""
    return "--" + normalize_option(name).replace("_", "-")


def yaml_key(name: str) -> str:
    """The `--config` YAML spelling of an option: `max_num_seqs` -> `max-num-seqs`."""
    return normalize_option(name).replace("_", "-")


@cache
def installed_vllm_options(site: Path | None = None) -> frozenset[str] | None:
    """The option names of the installed vLLM: the fields of `EngineArgs`, read from the
    source of `vllm/engine/arg_utils.py` (not imported: that would import torch), plus the
    server's. None where vLLM is not installed or its source cannot be read (then nothing is
    judged by it). `site`: the folder holding the `vllm` package (for tests)."""
    if site is None:
        spec = importlib.util.find_spec("vllm")  # finds the package without running it
        if spec is None or not spec.submodule_search_locations:
            return None
        package = Path(next(iter(spec.submodule_search_locations)))
    else:
        package = site / "vllm"
    try:
        tree = ast.parse((package / "engine" / "arg_utils.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError) as err:
        logger.debug("cannot read the installed vLLM's engine arguments: %s", err)
        return None
    engine_args = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EngineArgs"), None
    )
    if engine_args is None:
        return None
    fields = {
        node.target.id
        for node in engine_args.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    return frozenset(fields | SERVER_OPTIONS) if fields else None


def fp8_kv_cache(value: object) -> bool:
    """Whether a `kv_cache_dtype` value is an FP8 cache (`fp8`, `fp8_e4m3`, `fp8_e5m2`): one
    byte a value, half what a 16-bit cache (`auto` on a 16-bit model) takes."""
    return isinstance(value, str) and value.startswith("fp8")
