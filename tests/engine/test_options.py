"""The vocabulary of vLLM option names and their spellings."""

from __future__ import annotations

import pytest

from autotune.engine import (
    cli_flag,
    is_known_option,
    known_options,
    normalize_option,
    suggest_option,
    yaml_key,
)


@pytest.mark.parametrize(
    "name",
    [
        "max_num_seqs",
        "max_num_batched_tokens",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "kv_cache_dtype",
        "block_size",
        "enforce_eager",
        "max_model_len",
        "compilation_config",
        "host",
        "port",
        "served_model_name",
    ],
)
def test_known_options(name: str) -> None:
    assert name in known_options()
    assert is_known_option(name)


def test_known_options_are_snake_case() -> None:
    names = known_options()
    assert len(names) > 100
    assert all(name == name.strip() and "-" not in name and name for name in names)


@pytest.mark.parametrize("name", ["max_num_seq", "num_seqs", "frobnicate", "", "--"])
def test_unknown_options(name: str) -> None:
    assert not is_known_option(name)


@pytest.mark.parametrize(
    "spelling", ["--max-num-seqs", "max-num-seqs", "max_num_seqs", "  --max-num-seqs "]
)
def test_normalize_option(spelling: str) -> None:
    assert normalize_option(spelling) == "max_num_seqs"
    assert is_known_option(spelling)


def test_suggest_option_for_a_typo() -> None:
    assert suggest_option("max_num_seq") == "max_num_seqs"
    assert suggest_option("--gpu-memory-utilisation") == "gpu_memory_utilization"


def test_no_suggestion_for_nonsense() -> None:
    assert suggest_option("zzzzzzzzzzzzzzzzzzzz") is None


@pytest.mark.parametrize("spelling", ["max_num_seqs", "max-num-seqs", "--max-num-seqs"])
def test_spellings(spelling: str) -> None:
    assert cli_flag(spelling) == "--max-num-seqs"
    assert yaml_key(spelling) == "max-num-seqs"
