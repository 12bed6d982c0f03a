"""`autotune.spec.check_request`: what a new `tune` request may not ask at once (issue 49).
Each of these was accepted with exit 0 and the flag ignored, or ran a study no trial could
finish as asked; what stays allowed beside them is checked too. The CLI's rows (one line,
nothing created) are in tests/cli/test_hostile_input.py."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.spec import SpecError, check_request, load_spec

BASE = {"study": "s", "model": "m"}


def request(**fields: Any) -> None:
    check_request(load_spec(None, {**BASE, **fields}))


CAPACITY = {"capacity": {}, "slos": {"p99_ttft_ms": 500}}


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({**CAPACITY, "load": {"rate": 5}}, "--rate with --load capacity"),
        ({**CAPACITY, "prune": True}, "--prune with --load capacity"),
        ({**CAPACITY, "repeats": 3}, "--repeats 3 with --load capacity"),
        ({"confirm": 2, "trials": 1}, "--confirm 2 with --trials 1"),
        (
            {"objectives": [{"metric": "goodput", "direction": "maximize"}] * 2},
            "--objective goodput is given twice",
        ),
        ({"slos": {"output_throughput": 100}}, "--slo output_throughput bounds it from above"),
        (
            {
                "relative_slos": {"goodput": 1.0},
                "objectives": [{"metric": "goodput", "direction": "maximize"}],
            },
            "--slo goodput bounds it from above",
        ),
        ({"relative_slos": {"errors": 2.0}}, "--slo errors=baseline*FACTOR"),
        ({"workload": "random:output=1", "slos": {"p90_itl_ms": 9}}, "ITL is measured between"),
        (
            {"workload": "random:output=1", "relative_slos": {"p99_tpot_ms": 1.2}},
            "--slo p99_tpot_ms: every request of the workload generates 1 token",
        ),
        ({"scenario": "offline", "slos": {"p99_itl_ms": 9}}, "an offline batch streams nothing"),
    ],
)
def test_a_request_that_contradicts_itself_is_one_line(fields: dict, says: str) -> None:
    with pytest.raises(SpecError) as info:
        request(**fields)
    assert says in str(info.value)


@pytest.mark.parametrize(
    "fields",
    [
        {**CAPACITY, "load": {"concurrency": 8}},  # a cap on every level's requests in flight
        CAPACITY,
        {"confirm": 1, "trials": 2},
        {"prune": True, "repeats": 2},  # each batch of the trial may be stopped early
        {
            "slos": {"p99_ttft_ms": 500},
            "objectives": [{"metric": "p99_ttft_ms", "direction": "minimize"}],
        },
        {"workload": "random:output=1"},  # the default objectives' TPOT is only unmeasured
        {"workload": "random:output=2,output_spread=0.5", "slos": {"p99_tpot_ms": 9}},  # 1 to 3
        {"workload": "random:output=2", "slos": {"p99_tpot_ms": 9}},
        {"scenario": "offline", "slos": {"p99_tpot_ms": 9}},
        {"relative_slos": {"p99_ttft_ms": 1.2}},
    ],
)
def test_what_stays_allowed_beside_them(fields: dict) -> None:
    request(**fields)


def test_a_stored_spec_is_read_as_it_was_made() -> None:
    """`worker`, `confirm` and `profile` load the study's spec, whose load holds the rate it
    was dumped with, whatever the study asked: only `tune` judges a request."""
    made = load_spec(None, {**BASE, **CAPACITY}).shared()
    assert made["load"]["rate"] is not None and made["capacity"] is not None
    stored = load_spec(None, {**made, "study": "s"})  # the worker's spec: no SpecError
    with pytest.raises(SpecError, match="--rate with --load capacity"):
        check_request(stored)  # which is why `worker` and `confirm` never judge it a request
