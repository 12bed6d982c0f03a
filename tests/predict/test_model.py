"""autotune.predict: the step-time fit recovers a known engine from its requests alone, and the
calibrated model predicts configs it never saw, with the study's own error as its interval."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from autotune.bench import LoadProfile, RequestRecord, summarize
from autotune.predict import EngineModel, Sample, SchedulerConfig, replay, widths_of
from autotune.predict._fit import LinearTimer
from autotune.predict._model import PRIOR_WIDTH, KvCapacity, workload

# The engine: 3 ms a step (1 of it the weights, split by TP), 40 us a batched token, 20 us a
# sequence, 2 ns an attended token, 8 ms of API server per request.
TRUE = LinearTimer((2e-3, 1e-3, 4e-5, 2e-5, 2e-9, 0.0, 0.0, 8e-3))
LOAD = LoadProfile(rate=30.0, concurrency=64, seed=1)
DEFAULTS = {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "block_size": 16,
            "enable_chunked_prefill": True}  # fmt: skip
BYTES_PER_TOKEN = 4096
LENGTHS = tuple(
    (random.Random(k).randint(100, 400), random.Random(-k - 1).randint(16, 96)) for k in range(160)
)


def measured(seqs: int, tokens: int, kv_mib: int) -> Sample:
    """What the load client would record of the true engine running this config."""
    kv_tokens = kv_mib * 2**20 // BYTES_PER_TOKEN
    cfg = SchedulerConfig(seqs, tokens, kv_tokens // 16, 16, True)
    sent = [RequestRecord(i, 0.0, None, (), 0.0, p, o) for i, (p, o) in enumerate(LENGTHS)]
    run = replay(cfg, TRUE, workload(sent, LOAD))
    shift = TRUE.per_request
    records = [
        dataclasses.replace(
            r,
            send_time=r.send_time + 100.0,  # the client's clock starts anywhere
            first_token_time=(r.first_token_time or 0.0) + shift + 100.0,
            token_times=tuple(t + shift + 100.0 for t in r.token_times),
            end_time=r.end_time + shift + 100.0,
        )
        for r in run.records()
    ]
    args = {"max_num_seqs": seqs, "max_num_batched_tokens": tokens,
            "kv_cache_memory_bytes": kv_mib * 2**20}  # fmt: skip
    return Sample(args, kv_tokens, records)


TRAIN = [measured(128, 2048, 256), measured(8, 512, 256), measured(32, 1024, 64),
         measured(64, 4096, 128), measured(16, 256, 512)]  # fmt: skip


@pytest.fixture(scope="module")
def model() -> EngineModel:
    fitted = EngineModel.calibrate(TRAIN, LOAD, DEFAULTS)
    assert fitted is not None
    return fitted


@pytest.mark.parametrize("seqs,tokens,kv_mib", [(24, 768, 192), (96, 3072, 96), (4, 256, 32)])
def test_an_untried_config_is_predicted_from_five_measured_ones(
    model: EngineModel, seqs: int, tokens: int, kv_mib: int
) -> None:
    truth = summarize(measured(seqs, tokens, kv_mib).records)
    p = model.predict(measured(seqs, tokens, kv_mib).args)
    assert p.failure is None and p.trials == 5
    # The fit need not find the exact coefficients (a prefill token's and a prefill pair's
    # cost trade off on five trials): within 5%, a tail within 10%.
    for name in ("output_throughput", "p50_ttft_ms", "p50_tpot_ms"):
        assert p.metrics[name].mid == pytest.approx(truth.metric(name), rel=0.05), name
    for name in ("p99_ttft_ms", "p99_tpot_ms"):
        assert p.metrics[name].mid == pytest.approx(truth.metric(name), rel=0.1), name
    assert p.kv_tokens == kv_mib * 2**20 // BYTES_PER_TOKEN  # tokens per byte, as measured


def test_a_client_that_got_many_tokens_at_once_does_not_unteach_the_step(
    model: EngineModel,
) -> None:
    """On a busy host a client may read a request's tokens in one chunk: its first token
    then reads late and its decode short. The end-to-end times still hold the steps."""

    def bunched(s: Sample) -> Sample:
        records = [
            dataclasses.replace(r, first_token_time=r.end_time, token_times=(r.end_time,) * 2)
            if r.index % 3 == 0
            else r
            for r in s.records
        ]
        return Sample(s.args, s.kv_tokens, records)

    other = EngineModel.calibrate([bunched(s) for s in TRAIN], LOAD, DEFAULTS)
    assert other is not None
    untried = measured(24, 768, 192)
    truth = summarize(untried.records)
    p = other.predict(untried.args)
    assert p.metrics["p50_tpot_ms"].mid == pytest.approx(truth.metric("p50_tpot_ms"), rel=0.15)
    assert p.metrics["output_throughput"].mid == pytest.approx(
        truth.metric("output_throughput"), rel=0.1
    )


def test_a_kv_pool_below_one_request_is_predicted_not_to_start(model: EngineModel) -> None:
    p = model.predict({"max_num_seqs": 8, "max_num_batched_tokens": 512,
                       "kv_cache_memory_bytes": 2 * BYTES_PER_TOKEN * 16})  # fmt: skip
    assert p.failure == "kv_capacity" and not p.metrics


def test_the_interval_is_the_studys_own_error(model: EngineModel) -> None:
    args = measured(24, 768, 192).args
    prior = model.predict(args).metrics["p99_ttft_ms"]
    assert prior.high / prior.mid == pytest.approx(math.exp(PRIOR_WIDTH))
    assert prior.low < prior.mid < prior.high
    model.widths = widths_of({"p99_ttft_ms": [0.1, 0.4]})  # the largest while few are known
    scored = model.predict(args).metrics["p99_ttft_ms"]
    assert scored.high / scored.mid == pytest.approx(math.exp(0.4))
    many = widths_of({"m": [0.1] * 2 + [0.2] * 6 + [0.5, 0.9]})  # then the 80th percentile
    assert many["m"] == pytest.approx(0.2)
    assert widths_of({"m": [0.001]})["m"] == pytest.approx(0.03)  # never below +-3%


def test_capacity_without_a_kv_size_follows_the_memory_options() -> None:
    def s(util: float, tokens: int, kv: int) -> Sample:
        return Sample({"gpu_memory_utilization": util, "max_num_batched_tokens": tokens}, kv, ())

    # kv = 1e6 * util - 20 * batched tokens - 100,000: a line in the options
    line = [s(u, t, int(1e6 * u - 20 * t - 1e5)) for u, t in
            [(0.8, 2048), (0.9, 2048), (0.9, 8192), (0.85, 4096), (0.95, 1024)]]  # fmt: skip
    got = KvCapacity(line).tokens({"gpu_memory_utilization": 0.88, "max_num_batched_tokens": 6000})
    assert got == pytest.approx(1e6 * 0.88 - 20 * 6000 - 1e5, rel=1e-3)
    few = KvCapacity(line[:2]).tokens(
        {"gpu_memory_utilization": 0.81, "max_num_batched_tokens": 2048}
    )
    assert few == line[0].kv_tokens  # too few to fit a line: the closest measured trial's
    # An option a config leaves unset is the engine's default (vLLM 0.32: utilization 0.92),
    # as is one a trial left unset.
    engine = {"gpu_memory_utilization": 0.92, "max_num_batched_tokens": 2048}
    unset = KvCapacity(line, engine).tokens({})
    assert unset == pytest.approx(1e6 * 0.92 - 20 * 2048 - 1e5, rel=1e-3)
    implicit = [
        *line[:4],
        Sample({"max_num_batched_tokens": 1024}, int(1e6 * 0.92 - 2e4 - 1e5), ()),
    ]
    got = KvCapacity(implicit, engine).tokens({"gpu_memory_utilization": 0.88})
    assert got == pytest.approx(1e6 * 0.88 - 20 * 2048 - 1e5, rel=1e-3)


def test_an_fp8_cache_holds_twice_the_tokens_of_a_16_bit_one_in_the_same_memory() -> None:
    # The trials ran a bf16 cache (and one fp8, which held twice the tokens of its memory);
    # an fp8 config of the same memory holds twice what the line in the options gives.
    def s(util: float, tokens: int, dtype: str = "auto") -> Sample:
        per_byte = 2 if dtype == "fp8" else 1
        kv = per_byte * int(1e6 * util - 20 * tokens - 1e5)
        options = {"gpu_memory_utilization": util, "max_num_batched_tokens": tokens}
        return Sample({**options, "kv_cache_dtype": dtype}, kv, ())

    line = [s(0.8, 2048), s(0.9, 2048), s(0.9, 8192, "fp8"), s(0.85, 4096), s(0.95, 1024)]
    options = {"gpu_memory_utilization": 0.88, "max_num_batched_tokens": 6000}
    bf16 = KvCapacity(line).tokens(options)
    assert bf16 == pytest.approx(1e6 * 0.88 - 20 * 6000 - 1e5, rel=1e-3)
    fp8 = KvCapacity(line).tokens({**options, "kv_cache_dtype": "fp8_e4m3"})
    assert fp8 == pytest.approx(2 * bf16, rel=1e-3)
    sized = [Sample({"kv_cache_memory_bytes": 2**30, "kv_cache_dtype": d}, n, ()) for d, n in
             (("auto", 8192), ("fp8", 16384))]  # fmt: skip
    assert KvCapacity(sized).tokens({"kv_cache_memory_bytes": 2**29}) == 4096
    assert (
        KvCapacity(sized).tokens({"kv_cache_memory_bytes": 2**29, "kv_cache_dtype": "fp8"}) == 8192
    )
