"""The vocabulary of vLLM options: which names exist and how they are spelled.

The list of engine-argument names is read from vLLM 0.32's `EngineArgs` and kept as data, so
that the tuner can check a search space without importing vLLM (which imports torch).
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import logging
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
