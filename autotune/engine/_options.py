"""The vocabulary of vLLM options: which names exist and how they are spelled.

The list of engine-argument names is read from vLLM 0.32's `EngineArgs` and kept as data, so
that the tuner can check a search space without importing vLLM (which imports torch).
"""

from __future__ import annotations

import difflib
from functools import cache
from importlib import resources

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


def cli_flag(name: str) -> str:
    """The command-line spelling of an option: `max_num_seqs` -> `--max-num-seqs`."""
    return "--" + normalize_option(name).replace("_", "-")


def yaml_key(name: str) -> str:
    """The `--config` YAML spelling of an option: `max_num_seqs` -> `max-num-seqs`."""
    return normalize_option(name).replace("_", "-")
