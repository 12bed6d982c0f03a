"""Derived choices: `decode_batch` as max_cudagraph_capture_size, computed per config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.space import SpaceError, load_space
from autotune.space._derived import decode_batch

SPACE = """
name: d
platform: cuda
parameters:
  - name: max_num_seqs
    type: categorical
    choices: [64, 256]
    baseline: 256
  - name: max_num_batched_tokens
    type: categorical
    choices: [512, 8192]
    baseline: 8192
  - name: speculative_method
    type: categorical
    option: speculative_config.method
    choices: [null, ngram]
    baseline: null
  - name: num_speculative_tokens
    type: int
    option: speculative_config.num_speculative_tokens
    low: 1
    high: 6
    baseline: 3
    only_if: {speculative_method: [ngram]}
  - name: max_cudagraph_capture_size
    type: categorical
    choices: [null, decode_batch, 256]
    derived: [decode_batch]
    baseline: null
"""


NGRAM3 = {"method": "ngram", "num_speculative_tokens": 3}


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"max_num_seqs": 256}, 256),
        ({"max_num_seqs": 256, "speculative_config": NGRAM3}, 1024),
        ({"max_num_seqs": 256, "speculative_config": {"num_speculative_tokens": 3}}, 256),
        ({"max_num_seqs": 256, "max_num_batched_tokens": 512, "speculative_config": NGRAM3}, 512),
        ({}, None),  # vLLM derives max_num_seqs from the device: nothing to compute from
    ],
)
def test_decode_batch_is_the_widest_decode_step(options: dict[str, Any], expected: Any) -> None:
    assert decode_batch(options) == expected


def space_file(tmp_path: Path, text: str = SPACE) -> Path:
    path = tmp_path / "d.yaml"
    path.write_text(text)
    return path


def test_to_engine_computes_it_from_the_other_options(tmp_path: Path) -> None:
    space = load_space(str(space_file(tmp_path)))
    base = space.baseline_params() | {"max_cudagraph_capture_size": "decode_batch"}
    assert space.to_engine(base)[0]["max_cudagraph_capture_size"] == 256
    drafts = base | {"speculative_method": "ngram", "num_speculative_tokens": 2}
    assert space.to_engine(drafts)[0]["max_cudagraph_capture_size"] == 768  # 256 x (1 + 2)
    small = drafts | {"max_num_seqs": 64, "max_num_batched_tokens": 512}
    assert space.to_engine(small)[0]["max_cudagraph_capture_size"] == 192
    assert "max_cudagraph_capture_size" not in space.to_engine(space.baseline_params())[0]


def test_the_shipped_cuda_space_offers_it() -> None:
    space = load_space("cuda")
    params = space.baseline_params() | {"max_cudagraph_capture_size": "decode_batch"}
    options = space.to_engine(params)[0]
    assert options["max_cudagraph_capture_size"] == options["max_num_seqs"]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("derived: [decode_batch]", "derived: [prefill]", "unknown derived value 'prefill'"),
        ("[null, decode_batch, 256]", "[null, 128, 256]", "'decode_batch' is not one of the"),
    ],
)
def test_bad_derived_values_are_refused(tmp_path: Path, old: str, new: str, message: str) -> None:
    with pytest.raises(SpaceError, match=message):
        load_space(str(space_file(tmp_path, SPACE.replace(old, new))))
