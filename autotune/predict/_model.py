"""The calibrated engine model of one study: what an untried config would measure, with an
interval, and how wrong such predictions have been in this study.

`EngineModel.calibrate` takes the study's measured trials (engine options, the KV capacity the
engine logged, the load client's records) and its load profile: the step-time coefficients are
fitted to every measured request (`_fit.py`); an untried config's KV capacity comes from the
trials' own figures (`KvCapacity`); its run is the study's workload replayed through its
schedule, and its metrics are `autotune.bench.summarize`'s over the replayed records.

The interval is the study's own evidence: every launched trial is predicted before it runs,
and a metric's relative error so far (|log(measured / predicted)|, the largest while fewer
than `FEW` are known, else their 80th percentile) is the interval's half-width; before any is
known, `PRIOR_WIDTH`. Nothing here is assumed about the hardware.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.bench import LoadProfile, RequestRecord, Summary, summarize
from autotune.engine import fp8_kv_cache, logical_option
from autotune.predict._fit import LinearTimer, Observed, fit, usable
from autotune.predict._replay import Arrivals, fits_one_request, replay
from autotune.predict._scheduler import SchedulerConfig

PREDICTED = (
    "output_throughput",
    "total_throughput",
    "request_throughput",
    "goodput",
    *(f"{q}_{m}_ms" for m in ("ttft", "tpot", "e2e") for q in ("mean", "p50", "p90", "p99")),
)
# What `show`, `predict` and the dashboard put beside the measurement, and whose running error
# they give: throughput, and p50 / p99 of TTFT and TPOT.
REPORTED = ("output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms")
PRIOR_WIDTH = math.log(1.5)  # before any prediction was scored: within a factor 1.5
FEW = 5  # below this many scored predictions, the width is the largest error seen
MIN_WIDTH = 0.03  # no interval narrower than +-3% (the host's own run-to-run noise)
KV_BYTES = "kv_cache_memory_bytes"
# The engine options the model reads (the schedule's, the KV cache's, the parallel degree);
# others (prefix caching, quantization, kernels) it cannot tell apart.
MODELLED_OPTIONS = frozenset(
    {
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
        "enable_chunked_prefill",
        KV_BYTES,
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "pipeline_parallel_size",
    }
)


@dataclass(frozen=True)
class Sample:
    """One measured trial: the engine options it ran, the KV tokens its engine logged, its
    TP degree and the requests the load client recorded."""

    args: Mapping[str, Any]
    kv_tokens: int
    records: Sequence[RequestRecord]


@dataclass(frozen=True)
class Interval:
    low: float
    mid: float
    high: float

    def stored(self) -> list[float]:
        return [self.low, self.mid, self.high]


@dataclass(frozen=True)
class Prediction:
    """What a config would measure (`metrics`, each with its interval), or why it would not
    run (`failure`: `kv_capacity`); `trials`: the measured trials the model was fitted on."""

    metrics: dict[str, Interval] = field(default_factory=dict)
    kv_tokens: int = 0
    trials: int = 0
    failure: str | None = None
    summary: Summary | None = None  # the middle of each interval, as a measurement reads

    def stored(self) -> dict[str, Any]:
        out: dict[str, Any] = {"trials": self.trials, "kv_tokens": self.kv_tokens}
        if self.failure:
            out["failure"] = self.failure
        out["metrics"] = {k: v.stored() for k, v in self.metrics.items()}
        return out


def engine_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """Engine options as the model reads them (`max_num_seqs`), from a config in its YAML
    spelling as a trial stores it (`max-num-seqs`, `no-KEY: true`) or already logical."""
    return dict(logical_option(str(key), value) for key, value in config.items())


def tp_of(args: Mapping[str, Any]) -> int:
    return int(args.get("tensor_parallel_size") or 1) * int(args.get("pipeline_parallel_size") or 1)


def scheduler_config(
    args: Mapping[str, Any], kv_tokens: int, defaults: Mapping[str, Any]
) -> SchedulerConfig:
    """The schedule's options of `args` (a value not given: `defaults`, the engine's own)."""

    def value(name: str) -> Any:
        given = args.get(name)
        return defaults[name] if given is None else given

    block = int(value("block_size"))
    return SchedulerConfig(
        int(value("max_num_seqs")),
        int(value("max_num_batched_tokens")),
        kv_tokens // block,
        block,
        bool(value("enable_chunked_prefill")),
    )


@dataclass(frozen=True)
class KvCapacity:
    """KV tokens of an untried config from the measured ones: with `kv_cache_memory_bytes`,
    tokens per byte as measured; else a least-squares line in the memory options
    (utilization, batched tokens, sequences) per device, or the closest measured trial's."""

    samples: Sequence[Sample]
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the engine's, for unset options

    def tokens(self, args: Mapping[str, Any]) -> int:
        # Every figure in tokens of a 16-bit cache: an fp8 one holds twice as many per byte.
        tp, dtype = tp_of(args), self._per_byte(args)
        if args.get(KV_BYTES) is not None:
            ratios = [
                s.kv_tokens / self._per_byte(s.args) / tp_of(s.args) / float(s.args[KV_BYTES])
                for s in self.samples
                if s.args.get(KV_BYTES)
            ]
            if ratios:
                return int(statistics.median(ratios) * float(args[KV_BYTES]) * tp * dtype)
        x = self._memory_row(args)
        rows = [
            (self._memory_row(s.args), s.kv_tokens / self._per_byte(s.args) / tp_of(s.args))
            for s in self.samples
        ]
        if len({tuple(r) for r, _ in rows}) >= 4:
            a = np.array([r for r, _ in rows])
            b = np.array([y for _, y in rows])
            coef, *_ = np.linalg.lstsq(a, b, rcond=None)
            return max(0, int(float(np.dot(coef, x)) * tp * dtype))
        nearest = min(rows, key=lambda row: float(np.sum(np.abs(np.array(row[0]) - x))))
        return int(nearest[1] * tp * dtype)

    def _per_byte(self, args: Mapping[str, Any]) -> float:
        """Tokens per byte of `args`' KV cache against a 16-bit one: 2 for an fp8 cache
        (`kv_cache_dtype` fp8, fp8_e4m3, fp8_e5m2), else 1 (`auto`: the model's dtype)."""
        dtype = args.get("kv_cache_dtype") or self.defaults.get("kv_cache_dtype")
        return 2.0 if fp8_kv_cache(dtype) else 1.0

    def _memory_row(self, args: Mapping[str, Any]) -> list[float]:
        """The memory options of `args` (an unset one: the engine's default), scaled."""

        def value(name: str) -> float:
            given = args.get(name)
            given = self.defaults.get(name) if given is None else given
            return float(given or 0)

        return [value("gpu_memory_utilization"), 1.0, value("max_num_batched_tokens") / 1e4,
                value("max_num_seqs") / 1e3]  # fmt: skip


@dataclass
class EngineModel:
    coef: tuple[float, ...]
    workload: Arrivals
    capacity: KvCapacity
    defaults: Mapping[str, Any]
    trials: int
    widths: dict[str, float] = field(default_factory=dict)  # metric -> half-width (log)

    @classmethod
    def calibrate(
        cls,
        samples: Sequence[Sample],
        load: LoadProfile,
        defaults: Mapping[str, Any],
        errors: Mapping[str, Sequence[float]] | None = None,
        start: Sequence[float] | None = None,
        refit: bool = True,
    ) -> EngineModel | None:
        """The model of `samples` (None without one usable trial); `errors`: the scored
        predictions' errors by metric (the intervals' widths); `start`: the fit's start, or
        without `refit` the coefficients to keep."""
        pairs = [(s, usable(s.records)) for s in samples if s.kv_tokens > 0]
        kept = [(s, records) for s, records in pairs if records]
        if not kept:
            return None
        observed = [
            Observed(scheduler_config(s.args, s.kv_tokens, defaults), tp_of(s.args), records)
            for s, records in kept
        ]
        coef = fit(observed, start) if refit or start is None else tuple(start)
        used = [s for s, _ in kept]
        return cls(coef, workload(used[0].records, load), KvCapacity(used, defaults), defaults,
                   len(used), widths_of(errors or {}))  # fmt: skip

    def predict(
        self, args: Mapping[str, Any], slos: Mapping[str, float] | None = None
    ) -> Prediction:
        """What a config of engine options `args` would measure (`slos`: goodput's bounds)."""
        kv = self.capacity.tokens(args)
        cfg = scheduler_config(args, kv, self.defaults)
        if not fits_one_request(cfg, self.workload.lengths) or cfg.num_blocks <= 0:
            return Prediction(kv_tokens=kv, trials=self.trials, failure="kv_capacity")
        timer = LinearTimer(self.coef, tp_of(args))
        run = replay(cfg, timer, self.workload)
        summary = summarize(run.records(shift=timer.per_request), slos)
        metrics = {}
        for name in PREDICTED:
            mid = float(summary.metric(name))
            w = self.widths.get(name, PRIOR_WIDTH)
            metrics[name] = Interval(mid * math.exp(-w), mid, mid * math.exp(w))
        return Prediction(metrics, kv, self.trials, summary=summary)


def workload(records: Sequence[RequestRecord], load: LoadProfile) -> Arrivals:
    """The study's workload as the replay sends it: a measured trial's requests (their
    lengths, in the order sent) at the load profile's offsets, with its cap."""
    ordered = sorted(records, key=lambda r: r.index)
    lengths = tuple((r.prompt_tokens, max(1, r.output_tokens)) for r in ordered)
    offsets = tuple(load.arrival_offsets(len(lengths)))
    return Arrivals(lengths, offsets, load.concurrency)


def error(measured: float, predicted: float) -> float | None:
    """|log(measured / predicted)|: the relative error either way (None where undefined)."""
    if not (measured > 0 and predicted > 0) or math.isinf(measured) or math.isinf(predicted):
        return None
    return abs(math.log(measured / predicted))


def widths_of(errors: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each metric's interval half-width from the study's scored predictions."""
    out = {}
    for name, values in errors.items():
        if not values:
            continue
        ordered = sorted(values)
        if len(ordered) < FEW:
            w = ordered[-1]
        else:
            w = ordered[min(len(ordered) - 1, math.ceil(0.8 * len(ordered)) - 1)]
        out[name] = max(MIN_WIDTH, w)
    return out
