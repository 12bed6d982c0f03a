"""Early stopping rules: when the requests finished so far already decide a trial."""

from __future__ import annotations

from autotune.bench import RequestRecord, percentile
from autotune.measure import PruneRule, make_judge
from autotune.measure._prune import FrontPoint

OBJECTIVES = [("output_throughput", "maximize"), ("p99_ttft_ms", "minimize")]


def request(
    i: int, ttft_s: float, error: str | None = None, tokens: int = 10, gap_s: float = 1.0
) -> RequestRecord:
    send = i * gap_s
    times = tuple(send + ttft_s + 0.01 * k for k in range(tokens))
    return RequestRecord(i, send, times[0], times, times[-1], 5, tokens, error)


def test_a_percentile_slo_is_broken_once_enough_requests_are_over_it() -> None:
    judge = make_judge(PruneRule(), OBJECTIVES, [], {"p99_ttft_ms": 100.0}, 1.0, total=10)
    # p99 of 10 values interpolates between the 9th and 10th: 2 values over the bound make it
    # surely over, whatever the other 8 are.
    assert judge([request(0, 0.5)]) is None
    reason = judge([request(0, 0.5), request(1, 0.2)])
    assert reason is not None and "p99_ttft_ms SLO already broken" in reason
    worst_case = [0.0] * 8 + [200.0, 200.0]
    assert percentile(worst_case, 99) > 100.0


def test_a_median_slo_needs_half_the_requests_over_it() -> None:
    judge = make_judge(PruneRule(), OBJECTIVES, [], {"p50_ttft_ms": 100.0}, 1.0, total=10)
    slow = [request(i, 0.5) for i in range(5)]
    assert judge(slow) is None  # 5 fast ones could still come: p50 = mean of 5th and 6th
    assert judge([*slow, request(5, 0.5)]) is not None
    assert percentile([0.0] * 4 + [500.0] * 6, 50) > 100.0


def test_the_error_rate_is_over_its_limit_for_good() -> None:
    judge = make_judge(PruneRule(), OBJECTIVES, [], {}, 0.1, total=10)
    failed = [request(i, 0.01, error="HTTP 500") for i in range(2)]
    assert judge(failed[:1]) is None
    assert "error rate already over" in str(judge(failed))


LATENCIES = [("p99_ttft_ms", "minimize"), ("p99_e2e_ms", "minimize")]


def test_dominated_with_margin_after_enough_requests() -> None:
    fast = [FrontPoint(3, tuple(request(i, 0.01) for i in range(16)))]
    judge = make_judge(PruneRule(margin=0.1, min_requests=4), LATENCIES, fast, {}, 1.0, 16)
    slow = [request(i, 0.3) for i in range(4)]
    assert judge(slow[:3]) is None  # too few requests to judge
    reason = judge(slow)
    assert reason is not None and "dominated by trial 3 with a 10% margin" in reason
    assert "on the same 4 of 16 requests" in reason


def test_within_the_margin_is_not_dominated() -> None:
    records = [request(i, 0.3) for i in range(8)]
    near = FrontPoint(1, tuple(request(i, 0.29) for i in range(16)))  # about 3% better
    judge = make_judge(PruneRule(margin=0.1, min_requests=4), LATENCIES, [near], {}, 1.0, 16)
    assert judge(records) is None
    far = FrontPoint(2, tuple(request(i, 0.2) for i in range(16)))  # a third better
    judge = make_judge(PruneRule(margin=0.1, min_requests=4), LATENCIES, [far], {}, 1.0, 16)
    assert judge(records) is not None


def test_a_partial_run_is_compared_with_the_same_requests_of_the_front() -> None:
    """A partial run's throughput window still holds the ramp-up, so it is lower than the
    whole run's: compared with the front's final values, the front trial itself would be
    "dominated" after 16 of its 64 requests. On the same requests, it is not."""
    run = [request(i, 0.3, gap_s=0.02) for i in range(64)]  # arrivals faster than latency
    front = [FrontPoint(5, tuple(run))]
    judge = make_judge(PruneRule(margin=0.1), OBJECTIVES, front, {}, 1.0, 64)
    from autotune.bench import summarize

    partial, whole = summarize(run[:16]), summarize(run)
    assert partial.output_throughput * 1.1 < whole.output_throughput  # the bias
    assert judge(run[:16]) is None


def test_a_front_trial_without_these_requests_on_this_machine_is_not_used() -> None:
    remote = [FrontPoint(3, ())]  # its folder is on another worker's machine
    judge = make_judge(PruneRule(min_requests=4), LATENCIES, remote, {}, 1.0, 16)
    assert judge([request(i, 5.0) for i in range(8)]) is None


def test_a_capacity_objective_is_never_judged_by_dominance() -> None:
    objectives = [("capacity_rps", "maximize"), ("p99_ttft_ms", "minimize")]
    front = [FrontPoint(1, tuple(request(i, 0.001) for i in range(4)))]
    judge = make_judge(PruneRule(min_requests=1), objectives, front, {}, 1.0, 4)
    assert judge([request(0, 5.0), request(1, 5.0)]) is None


def test_dominance_is_judged_once_per_tenth_of_the_requests(monkeypatch) -> None:
    """The judge runs in the client's event loop: it must not summarize at every look."""
    from autotune.measure import _prune

    calls = {"n": 0}
    real = _prune.summarize

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(_prune, "summarize", counting)
    front = [FrontPoint(1, tuple(request(i, 0.3) for i in range(100)))]
    judge = make_judge(PruneRule(margin=0.1), LATENCIES, front, {}, 1.0, 100)
    records = [request(i, 0.3) for i in range(100)]
    for k in range(1, 101):
        for _ in range(5):  # the guard looks several times between two finished requests
            assert judge(records[:k]) is None
    assert calls["n"] <= 2 * 10  # ours and the front's, at most once per tenth
