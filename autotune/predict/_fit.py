"""The step-time model and its fit to the requests a study measured.

A step of the engine takes close to a sum of known terms (weights read once per step and a
per-step overhead, the batched tokens' compute, a per-sequence cost, the KV cache read by
attention, the prefill chunks' attention pairs, and with tensor parallelism the all-reduces);
`FEATURES` names them, each divided by the TP degree where the work is split. The seconds per
unit of each term are the coefficients, fitted by non-negative least squares
(`scipy.optimize.nnls`) to every measured request of every measured trial:

- a request's TTFT is the rest of the step running when it was sent, plus every step until the
  one that sampled its first token, plus a per-request cost of the API server (`request`:
  HTTP, tokenization, detokenization), all sums of the terms above;
- its end-to-end time (last token - sent) adds the steps after its first token until its last.

The end-to-end time, not the decode time alone, because a client on a busy host may get many
tokens in one chunk: its first token then reads late and its decode short, while the last
token's time holds.

Which steps those are depends on the coefficients (when a request arrives relative to the
steps), so the fit alternates: replay every trial with the current coefficients, collect each
request's sums, solve, move towards the solution while that lowers the residual under the
schedule of the moved coefficients, and again until no move does. Each request's row is scaled
by its measured value plus the typical one of its kind in its trial (relative errors, with no
row near zero outweighing the rest), and each trial's rows by their count (every trial weighs
the same).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.bench import RequestRecord
from autotune.predict._replay import Arrivals, replay
from autotune.predict._scheduler import SchedulerConfig

FEATURES = (
    "step",  # per step: overhead (launch, sampler, scheduling)
    "step_per_tp",  # per step, split by TP: the weights read once
    "token",  # per batched token, split by TP: the linear layers' compute
    "seq",  # per scheduled sequence: per-sequence CPU work
    "context",  # per attended cached token, split by TP: attention's KV read
    "pair",  # per prefill (query, key) pair, split by TP: prefill attention
    "comm_token",  # per batched token, with TP > 1: the all-reduces
    "request",  # per request, added to its TTFT: the API server's own work
)
ROUNDS = 40  # replay-and-solve rounds at most, from a cold start
WARM_ROUNDS = 3  # from the last fit's coefficients
SETTLED = 1e-3  # a move must lower the residual by this share
STEPS = (1.0, 0.5, 0.25)  # how far a round moves towards the solution
MIN_STEP_S = 1e-6  # no step is shorter than a microsecond


@dataclass(frozen=True)
class LinearTimer:
    """Step time = coefficients . features, for one TP degree (a `StepTimer`)."""

    coef: tuple[float, ...]
    tp: int = 1

    def duration(self, tokens: int, seqs: int, context: int, pairs: int) -> float:
        c, tp = self.coef, self.tp
        comm = c[6] * tokens if tp > 1 else 0.0
        return (
            c[0] + (c[1] + c[2] * tokens + c[4] * context + c[5] * pairs) / tp + c[3] * seqs + comm
        )

    @property
    def per_request(self) -> float:
        return self.coef[7]


@dataclass(frozen=True)
class Observed:
    """One measured trial as the fit reads it: its schedule's options and KV pool, its TP
    degree, and the requests it completed (records of the load client)."""

    config: SchedulerConfig
    tp: int
    records: tuple[RequestRecord, ...]

    def arrivals(self) -> Arrivals:
        """The requests as they were sent (the measured send times: no cap to replay)."""
        start = min(r.send_time for r in self.records)
        lengths = tuple((r.prompt_tokens, max(1, r.output_tokens)) for r in self.records)
        return Arrivals(lengths, tuple(r.send_time - start for r in self.records))


def usable(records: Sequence[RequestRecord]) -> tuple[RequestRecord, ...]:
    """The completed requests with a first token, in send order."""
    good = [r for r in records if r.ok and r.ttft is not None and r.output_tokens >= 1]
    return tuple(sorted(good, key=lambda r: r.send_time))


def rows(trial: Observed, timer: LinearTimer) -> tuple[np.ndarray, np.ndarray]:
    """Each request's TTFT and end-to-end time as sums of step features, by the schedule that
    `timer` gives (rows interleaved: TTFT, e2e, TTFT, ...), and the measured values."""
    run = replay(trial.config, timer, trial.arrivals(), log=True)
    assert run.log is not None
    if not run.log:
        return np.zeros((0, len(FEATURES))), np.zeros(0)
    log = np.array(run.log, dtype=float)  # tokens, seqs, context, pairs, end
    tp = trial.tp
    shapes = np.zeros((len(log), len(FEATURES)))
    shapes[:, 0], shapes[:, 1] = 1.0, 1.0 / tp
    shapes[:, 2], shapes[:, 3] = log[:, 0] / tp, log[:, 1]
    shapes[:, 4], shapes[:, 5] = log[:, 2] / tp, log[:, 3] / tp
    shapes[:, 6] = log[:, 0] if tp > 1 else 0.0
    ends = log[:, 4]
    durations = shapes @ np.array(timer.coef)
    prefix = np.vstack([np.zeros(len(FEATURES)), np.cumsum(shapes, axis=0)])
    requests = run.requests
    arrival = np.array([r.arrival for r in requests])
    first = np.array([r.first_step for r in requests])
    last = np.searchsorted(ends, [r.finish or 0.0 for r in requests])
    at = np.minimum(np.searchsorted(ends, arrival, side="right"), first)
    start = ends[at] - durations[at]
    positive = durations[at] > 0
    share = np.where(
        positive,
        np.minimum(
            1.0, (ends[at] - np.maximum(arrival, start)) / np.where(positive, durations[at], 1)
        ),
        1.0,
    )
    ttft = share[:, None] * shapes[at] + prefix[first + 1] - prefix[at + 1]
    ttft[:, 7] = 1.0
    e2e = ttft + prefix[last + 1] - prefix[first + 1]
    out = np.empty((2 * len(requests), len(FEATURES)))
    out[0::2], out[1::2] = ttft, e2e
    target = np.empty(2 * len(requests))
    target[0::2] = [m.ttft or 0.0 for m in trial.records]
    target[1::2] = [m.e2e for m in trial.records]
    return out, target


def _typical(b: np.ndarray) -> np.ndarray:
    """Each row's typical size: the median of its kind (TTFT rows are the even ones, e2e rows
    the odd ones) in its trial. A row is weighed by its value plus that, so that a value near
    zero (a client that got every token in one chunk) does not outweigh the rest."""
    out = np.empty_like(b)
    for k in (0, 1):
        out[k::2] = max(float(np.median(b[k::2])), 1e-6) if len(b[k::2]) else 1e-6
    return out


def initial(trials: Sequence[Observed]) -> LinearTimer:
    """A start: every step as long as the median gap between two measured tokens."""
    gaps = [r.tpot for t in trials for r in t.records if r.tpot]
    coef = [0.0] * len(FEATURES)
    coef[0] = statistics.median(gaps) if gaps else 1e-3
    return LinearTimer(tuple(coef))


def fit(
    trials: Sequence[Observed], start: Sequence[float] | None = None, rounds: int = 0
) -> tuple[float, ...]:
    """The coefficients that best explain every measured request of `trials`.

    Each round solves for the requests' sums under the schedule of the current coefficients,
    then moves towards the solution as far as the residual under the moved coefficients' own
    schedule falls (the whole way, else half, a quarter, ...): the full step alone oscillates
    where queues form, as slower steps make longer queues make every TTFT a sum of more steps.
    It stops when no step lowers the residual by `SETTLED`, or after `rounds` (default:
    `ROUNDS`, from a cold start; `WARM_ROUNDS` from `start`, the coefficients of the last fit
    as a study adds a trial)."""
    from scipy.optimize import nnls  # 0.3 s of CPU: paid by a fit, not by every CLI command

    coef = np.array(start if start is not None else initial(trials).coef, dtype=float)
    rounds = rounds or (WARM_ROUNDS if start is not None else ROUNDS)
    residual, a, b = _system(trials, coef)
    for _ in range(rounds):
        if not len(b):
            break
        new, _ = nnls(a, b, maxiter=5000)
        new[0] = max(new[0], MIN_STEP_S - new[1])  # a step takes time
        for share in STEPS:
            moved = coef + share * (new - coef)
            r, a_moved, b_moved = _system(trials, moved)
            if r < residual * (1 - SETTLED):
                coef, residual, a, b = moved, r, a_moved, b_moved
                break
        else:
            break
    return tuple(float(c) for c in coef)


def _system(trials: Sequence[Observed], coef: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The requests' rows under the schedule of `coef`, scaled, and the residual of `coef`."""
    blocks_a, blocks_b = [], []
    for trial in trials:
        a, b = rows(trial, LinearTimer(tuple(coef), trial.tp))
        if not len(b):
            continue
        scale = 1.0 / (b + _typical(b)) / np.sqrt(len(b))
        blocks_a.append(a * scale[:, None])
        blocks_b.append(b * scale)
    if not blocks_a:
        return 0.0, np.zeros((0, len(FEATURES))), np.zeros(0)
    a, b = np.vstack(blocks_a), np.concatenate(blocks_b)
    return float(np.linalg.norm(a @ coef - b)), a, b
