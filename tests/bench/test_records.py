"""Request records: derived timings and JSON-lines round trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.bench import RequestRecord, read_records, write_records


def test_derived_timings() -> None:
    record = RequestRecord(0, 1.0, 1.5, (1.5, 1.75, 2.5), 3.0, 4, 3, None)
    assert record.ok
    assert record.ttft == 0.5
    assert record.itl == (0.25, 0.75)
    assert record.e2e == 1.5  # to the last token, not to end_time
    assert record.tpot == 0.5
    assert record.e2e - record.ttft == sum(record.itl)
    single = RequestRecord(1, 0.0, 0.5, (0.5,), 0.5, 4, 1, None)
    assert single.tpot is None and single.itl == ()
    failed = RequestRecord(2, 0.0, None, (), 2.0, 0, 0, "timeout")
    assert not failed.ok and failed.ttft is None and failed.tpot is None and failed.e2e == 2.0


def test_round_trip_is_exact(tmp_path: Path) -> None:
    records = [
        RequestRecord(0, 0.1 + 0.2, 1 / 3, (1 / 3, 2 / 3 + 1e-12), 1e9 + 0.1, 17, 2, None),
        RequestRecord(1, 5.0, None, (), 6.0, 0, 0, 'HTTP 500: "quoted"\nsecond line'),
    ]
    path = tmp_path / "records.jsonl"
    write_records(path, records)
    assert read_records(path) == records
    assert len(path.read_text().splitlines()) == 2


def test_bad_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    write_records(path, [RequestRecord(0, 0.0, None, (), 1.0, 0, 0, "x")])
    with path.open("a") as out:
        out.write('{"index": 1}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_records(path)
