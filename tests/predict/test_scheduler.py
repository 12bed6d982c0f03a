"""autotune.predict's scheduler and replay (vLLM V1's schedule on a step timer's clock)."""

from __future__ import annotations

import random

import pytest

from autotune.bench import summarize
from autotune.predict import Arrivals, SchedulerConfig, fits_one_request, replay
from autotune.predict._fit import LinearTimer

# 2 ms a step, 20 us a batched token, 5 us a sequence, 1 ns an attended token.
TIMER = LinearTimer((2e-3, 0.0, 2e-5, 5e-6, 1e-9, 0.0, 0.0, 0.0))


def arrivals(n: int, prompt: int, output: int, rate: float | None, cap: int | None, seed: int = 0):
    rng = random.Random(seed)
    lengths = tuple(
        (rng.randint(prompt // 2, prompt * 3 // 2), rng.randint(output // 2, output * 3 // 2))
        for _ in range(n)
    )
    now, offsets = 0.0, []
    for _ in range(n):
        offsets.append(now)
        now += rng.expovariate(rate) if rate else 0.0
    return Arrivals(lengths, tuple(offsets), cap)


def config(seqs: int, tokens: int = 2048, blocks: int = 10_000, chunked: bool = True):
    return SchedulerConfig(seqs, tokens, blocks, 16, chunked)


def test_more_sequences_more_throughput_and_shorter_queues() -> None:
    work = arrivals(200, 256, 64, rate=None, cap=200)
    runs = [summarize(replay(config(n), TIMER, work).records()) for n in (8, 32, 128)]
    tput = [r.output_throughput for r in runs]
    assert tput[0] < tput[1] < tput[2]
    assert runs[0].ttft_ms.p99 > runs[2].ttft_ms.p99


def test_fused_decode_steps_equal_single_steps() -> None:
    work = arrivals(120, 300, 80, rate=40.0, cap=None, seed=2)
    for cfg in (config(48), config(256, blocks=900)):
        fused = summarize(replay(cfg, TIMER, work).records())
        single = summarize(replay(cfg, TIMER, work, fuse=False).records())
        assert fused.output_throughput == pytest.approx(single.output_throughput, rel=1e-9)
        assert fused.tpot_ms.p99 == pytest.approx(single.tpot_ms.p99, rel=1e-9)
        assert fused.ttft_ms.p50 == pytest.approx(single.ttft_ms.p50, rel=1e-9)


def test_a_small_kv_pool_preempts_and_a_too_small_one_is_refused() -> None:
    work = arrivals(100, 512, 256, rate=None, cap=100)
    roomy, tight = replay(config(100), TIMER, work), replay(config(100, blocks=400), TIMER, work)
    assert roomy.preemptions == 0 < tight.preemptions
    assert (
        summarize(tight.records()).output_throughput < summarize(roomy.records()).output_throughput
    )
    assert not fits_one_request(config(8, blocks=10), work.lengths)  # 160 tokens < a request


def test_chunked_prefill_splits_a_long_prompt_and_without_it_the_budget_must_hold_it() -> None:
    work = Arrivals(((3000, 4),), (0.0,), None)
    chunked = replay(config(4, tokens=1024), TIMER, work, log=True)
    assert chunked.log is not None and len(chunked.log) == 3 + 3  # three chunks, then decodes
    assert [s.tokens for s in chunked.log[:3]] == [1024, 1024, 952]
    assert fits_one_request(config(4, tokens=1024), work.lengths)
    assert not fits_one_request(config(4, tokens=1024, chunked=False), work.lengths)
    whole = replay(config(4, tokens=4096, chunked=False), TIMER, work, log=True)
    assert whole.log is not None and [s.tokens for s in whole.log[:1]] == [3000]


def test_the_step_log_adds_up_to_the_replayed_times() -> None:
    work = arrivals(40, 128, 32, rate=20.0, cap=None, seed=4)
    run = replay(config(16), TIMER, work, log=True)
    assert run.log is not None
    ends = [s.end for s in run.log]
    assert ends == sorted(ends)
    for r in run.requests:
        assert r.first_token in ends and r.finish in ends and r.first_step >= 0
        assert run.log[r.first_step].end == r.first_token


def test_a_prompt_with_one_token_left_samples_its_first_token_in_its_own_step() -> None:
    """After chunks of 400, a prompt of 801 has one token left: the arithmetic of a decoding
    request (computed = prompt + generated - 1), but its step samples the first token. The
    fused decode steps once took it for a decode and finished it with no first token."""
    run = replay(config(4, tokens=400), TIMER, Arrivals(((801, 5),), (0.0,), None), log=True)
    (r,) = run.requests
    assert r.first_token is not None and r.finish is not None and r.first_token < r.finish
    assert run.log is not None and [s.tokens for s in run.log[:3]] == [400, 400, 1]
