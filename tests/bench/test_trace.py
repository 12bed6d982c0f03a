"""Trace workloads: rows read from JSONL (Mooncake) or CSV (Azure), replayed at their times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.bench import TraceWorkload, WorkloadError, build_requests, parse_workload
from autotune.bench._trace import read_trace

MOONCAKE = [  # the fields of Mooncake's published traces (timestamp in ms, 512-token blocks)
    {"timestamp": 0, "input_length": 700, "output_length": 4, "hash_ids": [0, 1]},
    {"timestamp": 3000, "input_length": 1100, "output_length": 6, "hash_ids": [0, 1, 2]},
    {"timestamp": 1000, "input_length": 90, "output_length": 8},
]


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 500, "eos_token_id": 0}))
    return tmp_path


def write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rows_in_time_order_with_times_from_the_first(tmp_path: Path) -> None:
    rows = read_trace(write(tmp_path / "t.jsonl", MOONCAKE))
    assert [(r.at_s, r.input_tokens, r.output_tokens, r.hash_ids) for r in rows] == [
        (0.0, 700, 4, (0, 1)),
        (1.0, 90, 8, ()),
        (3.0, 1100, 6, (0, 1, 2)),
    ]


def test_an_azure_style_csv_with_dates(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    rows = read_trace(path)
    assert [r.input_tokens for r in rows] == [374, 396]
    assert rows[1].at_s == pytest.approx(4.314579, abs=1e-3)


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ({"input_length": 3, "output_length": 1}, "needs a 'timestamp' (ms) or 'timestamp_s'"),
        ({"timestamp": 0, "output_length": 1}, "needs one of 'input_length'"),
        ({"timestamp": 0, "input_length": 0, "output_length": 1}, "input_length must be"),
        ({"timestamp": "soon", "input_length": 3, "output_length": 1}, "neither ms nor a date"),
        ({"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": ["a"]}, "hash_ids"),
        # Issue 45: a number from the file is bounded before a request is built from it.
        ({"timestamp": 0, "input_length": "inf", "output_length": 1}, "not a finite number"),
        ({"timestamp": 0, "input_length": "nan", "output_length": 1}, "not a finite number"),
        ({"timestamp": "inf", "input_length": 3, "output_length": 1}, "not a finite number"),
        ({"timestamp_s": "nan", "input_length": 3, "output_length": 1}, "not a finite number"),
        ({"timestamp": 0, "input_length": 10**12, "output_length": 1}, "from 1 to 16,777,216"),
        ({"timestamp": 0, "input_length": 3, "output_length": 1e30}, "from 1 to 16,777,216"),
    ],
)
def test_a_bad_row_is_one_line_naming_it(
    tmp_path: Path, row: dict[str, object], needle: str
) -> None:
    with pytest.raises(WorkloadError) as info:
        read_trace(write(tmp_path / "t.jsonl", [MOONCAKE[0], row]))
    assert needle in str(info.value) and "line 2" in str(info.value)
    assert "\n" not in str(info.value)


def test_requests_share_the_blocks_of_their_hash_ids(tmp_path: Path, model_dir: Path) -> None:
    path = write(tmp_path / "t.jsonl", MOONCAKE)
    workload = parse_workload(f"trace:path={path},rate_scale=2,prompt_format=ids,warmup=1")
    assert workload == TraceWorkload(path=path, rate_scale=2, prompt_format="ids", warmup=1)
    warmup, measured = build_requests(workload, str(model_dir))
    assert (warmup, measured) == build_requests(workload, str(model_dir))  # seeded
    assert [(r.at_s, r.max_tokens, len(r.prompt)) for r in measured] == [
        (0.0, 4, 700), (0.5, 8, 90), (1.5, 6, 1100),
    ]  # fmt: skip
    first, _, third = (list(r.prompt) for r in measured)
    assert first[:700] == third[:700]  # blocks 0 and 1 (1024 tokens), cut at 700
    assert first != third[:700] or len(third) > 700
    assert warmup[0].at_s is None and warmup[0].prompt[:512] != first[:512]
    other = build_requests(workload.model_copy(update={"seed": 1}), str(model_dir))[1]
    assert other[0].prompt != measured[0].prompt  # another run: other tokens, same shape
