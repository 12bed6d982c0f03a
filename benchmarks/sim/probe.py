"""An experiment, not a tuner feature: what a host-speed probe before each benchmark would buy.

A shared host's speed moves within a study (this project's 2-core host: +-5% from one engine
start to the next, and up to 26% over half an hour). Under a fixed arrival rate that hides
from the throughput (it is the offered rate) and shows in the latencies only through queues.
No correction of a slow run's latencies is exact, but a run sent at `rate * speed` on a host
at `speed` is the full-speed host under `rate` on a clock `speed` times as slow: its rates /
speed and latencies * speed are the config's at the study's start. This module reads that
speed from a probe: a few lone requests on the trial's engine before its benchmark.

- A lone request's decode speed does not depend on the knobs that size batches and memory
  (`NEUTRAL`): the weights are read once per token whatever the batch limits are. Every other
  parameter (tensor parallelism, quantization, dtypes, graphs) may change it and makes a
  probe class.
- Probe rate, in log: `log r_i = L[class_i] + g(t_i) + e_i`, with `g` the slow drift
  (piecewise linear over the probes' times, its curvature penalised, 0 at the first probe)
  and `e_i` the run's own level. `fit` solves that by least squares over the probes so far;
  a run's speed is then `r_i / exp(L[class_i])`, its own level included.

benchmarks/sim/tuning.py (`SimMeasure(probe_noise=...)`) sends each run at the speed read
this way and scores the search; docs/benchmarks.md has what it measured. Pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# Space parameters that do not change how fast one lone request decodes.
NEUTRAL = frozenset(
    {
        "max_num_seqs",
        "max_num_batched_tokens",
        "gpu_memory_utilization",
        "kv_cache_memory_bytes",
        "num_gpu_blocks_override",
        "swap_space",
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "long_prefill_token_threshold",
        "max_model_len",
    }
)
SMOOTH = 1.0  # weight of the drift's curvature penalty, in units of one probe's squared error
RIDGE = 0.01  # on the drift's log speeds, as autotune.drift: only keeps an unseen g near 0
MAX_RATIO = 2.0  # a speed is clipped to within 2x of the start either way


@dataclass(frozen=True)
class Probe:
    """One trial's probe: its class, its lone requests' decode rate (tokens/s), when it ran."""

    klass: str
    rate: float
    at: float


def probe_class(params: Mapping[str, object]) -> str:
    """The values of a config that may change a lone request's speed, as one key."""
    kept = {k: v for k, v in params.items() if k not in NEUTRAL}
    return json.dumps(kept, sort_keys=True, default=str)


def speeds(probes: Sequence[Probe]) -> list[float]:
    """Each probe's host speed, 1 at the first: `rate / exp(L[class])` of the joint fit."""
    if not probes:
        return []
    classes = sorted({p.klass for p in probes})
    n, k = len(probes), len(classes)
    times = sorted({p.at for p in probes})
    m = len(times)
    # Unknowns: L[class] (k), then g at each distinct time but the first (m - 1; g(t0) = 0).
    rows, rhs = [], []
    for p in probes:
        row = np.zeros(k + m - 1)
        row[classes.index(p.klass)] = 1.0
        j = times.index(p.at)
        if j > 0:
            row[k + j - 1] = 1.0
        rows.append(row)
        rhs.append(math.log(p.rate))
    for j in range(1, m - 1):  # curvature of g at interior times, scaled by their spacing
        row = np.zeros(k + m - 1)
        h0, h1 = times[j] - times[j - 1], times[j + 1] - times[j]
        for jj, w in ((j - 1, 1 / h0), (j, -1 / h0 - 1 / h1), (j + 1, 1 / h1)):
            if jj > 0:
                row[k + jj - 1] = w * math.sqrt(SMOOTH) * (h0 + h1) / 2
        rows.append(row)
        rhs.append(0.0)
    for j in range(1, m):  # a weak pull to the start's speed where nothing ties g down
        row = np.zeros(k + m - 1)
        row[k + j - 1] = math.sqrt(RIDGE)
        rows.append(row)
        rhs.append(0.0)
    solution = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)[0]
    limit = math.log(MAX_RATIO)
    out = []
    for p in probes:
        log_speed = math.log(p.rate) - solution[classes.index(p.klass)]
        out.append(math.exp(min(limit, max(-limit, log_speed))))
    first = out[0]
    return [s / first for s in out] if n else out
