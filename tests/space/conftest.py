from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.space import ModelInfo


@pytest.fixture
def tiny() -> ModelInfo:
    """The tiny test model: 4 layers, 4 heads, 4 KV heads, head_dim 64, 4096 positions, bf16."""
    return ModelInfo(
        num_attention_heads=4,
        num_key_value_heads=4,
        hidden_size=256,
        num_hidden_layers=4,
        head_dim=64,
        max_position_embeddings=4096,
        dtype="bfloat16",
        vocab_size=2048,
    )


@pytest.fixture
def write_space(tmp_path: Path) -> Callable[..., Path]:
    """Write YAML text to a file and return its path."""

    def write(text: str, name: str = "space.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
