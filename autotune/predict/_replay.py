"""Replay a workload through the scheduler: when each request would get its first and last
token, on a step timer's clock.

The client's side is the load client's (`autotune.bench.LoadProfile`): requests are sent at
their offsets, at most `cap` in flight (a request whose slot is taken waits for the next
finish). The result is in the load client's own records (`RequestRecord`), so the metrics of a
replay are computed by the one definition of docs/metrics.md (`autotune.bench.summarize`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.bench import RequestRecord
from autotune.predict._scheduler import Request, Scheduler, SchedulerConfig, StepShape, StepTimer


@dataclass(frozen=True)
class Arrivals:
    """The requests of a run: (prompt tokens, output tokens) each, when each is sent (seconds
    from the start) and how many may be in flight (None: no cap)."""

    lengths: tuple[tuple[int, int], ...]
    offsets: tuple[float, ...]
    cap: int | None = None

    def __post_init__(self) -> None:
        if len(self.lengths) != len(self.offsets):
            raise ValueError("one send offset per request")


@dataclass
class Replayed:
    """A replayed run: its requests (times filled in), the steps' log where asked."""

    requests: list[Request]
    preemptions: int
    log: list[StepShape] | None = None

    def records(self, every_token: bool = True, shift: float = 0.0) -> list[RequestRecord]:
        """The run as the load client would have recorded it (the tokens after the first
        spread evenly until the last: the replay does not keep every token's time; without
        `every_token`, only the first and the last). `shift`: seconds added to every token's
        time (the API server's own work per request, which the schedule does not see)."""
        out = []
        for r in self.requests:
            assert r.first_token is not None and r.finish is not None
            n = r.output
            first, last = r.first_token + shift, r.finish + shift
            gap = (last - first) / (n - 1) if n > 1 else 0.0
            if every_token or n < 3:
                times = tuple(first + k * gap for k in range(n))
            else:
                times = (first, last)
            out.append(RequestRecord(r.rid, r.arrival, first, times, last, r.prompt, n))
        return out


def replay(
    cfg: SchedulerConfig,
    timer: StepTimer,
    arrivals: Arrivals,
    *,
    fuse: bool = True,
    log: bool = False,
) -> Replayed:
    """Run `arrivals` through the scheduler of `cfg`, deterministically.

    `fuse=False` runs every step on its own (as a real-time server does); the result is the
    same. `log` keeps every step's shape (the fit reads it)."""
    steps: list[StepShape] | None = [] if log else None
    sched = Scheduler(cfg, timer, steps)
    offsets = arrivals.offsets
    cap = arrivals.cap or len(offsets)
    requests = [Request(i, p, o, 0.0) for i, (p, o) in enumerate(arrivals.lengths)]
    sent = in_flight = finished = 0
    slot_free_at = 0.0
    while finished < len(requests):
        while sent < len(requests) and in_flight < cap and offsets[sent] <= sched.now:
            requests[sent].arrival = max(offsets[sent], slot_free_at)
            sched.add(requests[sent])
            sent, in_flight = sent + 1, in_flight + 1
        if sched.idle:  # nothing to run until the next request is sent
            sched.now = offsets[sent]
            continue
        deadline = offsets[sent] if sent < len(requests) and in_flight < cap else math.inf
        done = sched.fast_forward(deadline) if fuse else None
        if done is None:
            step = sched.plan()
            done = [r for r in sched.commit(step, sched.now + step.duration) if r.finish]
        if done:
            finished += len(done)
            if in_flight >= cap:
                slot_free_at = sched.now
            in_flight -= len(done)
    return Replayed(requests, sched.preemptions, steps)


def fits_one_request(cfg: SchedulerConfig, lengths: Sequence[tuple[int, int]]) -> bool:
    """Whether every request can run (else the replay could not end): the KV pool holds the
    longest one whole (vLLM refuses to start a smaller one, `kv_capacity`), and without chunked
    prefill the step's budget holds the longest prompt (vLLM refuses a budget below
    max_model_len)."""
    longest = max((p + o for p, o in lengths), default=0)
    prompt = max((p for p, _ in lengths), default=0)
    if not cfg.enable_chunked_prefill and cfg.max_num_batched_tokens < prompt:
        return False
    return cfg.num_blocks * cfg.block_size >= longest
