"""vLLM V1's continuous-batching scheduler, reduced to what decides timing.

Each step, in order (`vllm/v1/core/sched/scheduler.py`):
1. running requests first: a decoding one takes 1 token of the `max_num_batched_tokens` budget,
   a partial prefill the rest of its prompt (capped by the budget); each allocates the KV
   blocks its new tokens need, and when the pool is empty the *last* running request is
   preempted (its blocks freed, its progress recomputed later: recompute preemption);
2. only if nothing was preempted, waiting requests are admitted, oldest first, while fewer than
   `max_num_seqs` run, budget is left and their blocks fit (without chunked prefill a prompt
   that does not fit the budget whole waits).
When a request's computed tokens reach its prompt (+ tokens generated before a preemption), the
step samples a token; it finishes after `output` tokens and frees its blocks.

How long a step takes is the `StepTimer`'s business: the simulator's roofline of a datasheet
(benchmarks/sim) or the step-time model fitted to a study's own trials (`_fit.py`). `replay`
drives it (with `fast_forward` to fuse pure-decode steps), as does the simulator's server in
real time (one `plan` / `commit` per step); both therefore see the same schedule. With `log`,
every step's shape is kept (`StepShape`): what the fit sums per request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple, Protocol


class SchedulerConfig(NamedTuple):
    """The engine options the schedule reads (vLLM's names) and the KV pool's size."""

    max_num_seqs: int
    max_num_batched_tokens: int
    num_blocks: int
    block_size: int = 16
    enable_chunked_prefill: bool = True


class StepTimer(Protocol):
    def duration(self, tokens: int, seqs: int, context: int, pairs: int) -> float:
        """Seconds of one step: `tokens` batched tokens of `seqs` sequences attending to
        `context` cached tokens in all; `pairs` (query, key) pairs of its prefill chunks."""
        ...


class StepShape(NamedTuple):
    """One executed step, as the step-time model reads it, and when it ended."""

    tokens: int
    seqs: int
    context: int
    pairs: int
    end: float


class Request:
    """One request's progress; times in (simulated) seconds."""

    __slots__ = (
        "arrival",
        "blocks",
        "computed",
        "finish",
        "first_step",
        "first_token",
        "generated",
        "output",
        "prompt",
        "rid",
    )

    def __init__(self, rid: int, prompt: int, output: int, arrival: float) -> None:
        self.rid, self.prompt, self.output, self.arrival = rid, prompt, max(1, output), arrival
        self.computed = self.generated = self.blocks = 0
        self.first_token: float | None = None
        self.finish: float | None = None
        self.first_step = -1  # index in the step log of the step that sampled its first token


@dataclass
class Step:
    """A planned step: (request, new tokens) pairs, its shape and duration."""

    scheduled: list[tuple[Request, int]]
    shape: tuple[int, int, int, int]
    duration: float


class Scheduler:
    def __init__(
        self, cfg: SchedulerConfig, timer: StepTimer, log: list[StepShape] | None = None
    ) -> None:
        self.cfg = cfg
        self.timer = timer
        self.block = cfg.block_size
        self.free_blocks = cfg.num_blocks
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.now = 0.0
        self.preemptions = 0
        self.log = log

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block)

    def _preempt_last(self) -> Request:
        victim = self.running.pop()
        self.free_blocks += victim.blocks
        victim.blocks = victim.computed = 0
        self.waiting.appendleft(victim)
        self.preemptions += 1
        return victim

    def plan(self) -> Step:
        """Choose the next step's tokens (allocating their blocks) and its duration."""
        budget = self.cfg.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        preempted = False
        bs, running = self.block, self.running
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = min(r.prompt + r.generated - r.computed, budget)
            need = (r.computed + n + bs - 1) // bs - r.blocks
            if need > 0:
                victim = None
                while need > self.free_blocks and victim is not r:
                    preempted = True
                    victim = self._preempt_last()
                if victim is r:
                    break  # r itself was preempted: it was the last one
                self.free_blocks -= need
                r.blocks += need
            scheduled.append((r, n))
            budget -= n
            i += 1
        if not preempted:
            budget = self._admit(budget, scheduled)
        shape = _shape(scheduled)
        return Step(scheduled, shape, self.timer.duration(*shape))

    def _admit(self, budget: int, scheduled: list[tuple[Request, int]]) -> int:
        chunked = self.cfg.enable_chunked_prefill
        while self.waiting and len(self.running) < self.cfg.max_num_seqs and budget > 0:
            r = self.waiting[0]
            n = r.prompt + r.generated - r.computed
            if n > budget and not chunked:
                break
            n = min(n, budget)
            need = self._blocks_for(r.computed + n) - r.blocks
            if need > self.free_blocks:
                break
            self.waiting.popleft()
            self.free_blocks -= need
            r.blocks += need
            self.running.append(r)
            scheduled.append((r, n))
            budget -= n
        return budget

    def commit(self, step: Step, end: float) -> list[Request]:
        """Apply a planned step that ended at `end`; the requests that got a token."""
        emitted: list[Request] = []
        done = False
        index = len(self.log) if self.log is not None else -1
        for r, n in step.scheduled:
            r.computed += n
            if r.computed == r.prompt + r.generated:
                r.generated += 1
                emitted.append(r)
                if r.first_token is None:
                    r.first_token, r.first_step = end, index
                if r.generated >= r.output:
                    r.finish = end
                    self.free_blocks += r.blocks
                    r.blocks = 0
                    done = True
        if done:
            self.running = [r for r in self.running if r.finish is None]
        if self.log is not None:
            self.log.append(StepShape(*step.shape, end))
        self.now = end
        return emitted

    def fast_forward(self, deadline: float) -> list[Request] | None:
        """Run several pure-decode steps at once, exactly as single steps would, stopping at
        the first finish or before a step that starts at or after `deadline` (an arrival);
        the requests that finished.

        None (nothing done) unless every running request decodes and no admission can happen.
        """
        running = self.running
        if not running or self._admissible():
            return None
        # Decoding: one token sampled, the last one not yet computed (a prompt with one token
        # left has the same arithmetic, but its step samples the first token).
        if any(r.generated < 1 or r.computed != r.prompt + r.generated - 1 for r in running):
            return None
        k = min(r.output - r.generated for r in running)
        k = self._block_limited(k)
        if k < 2:
            return None
        seqs = len(running)
        duration, log = self.timer.duration, self.log
        context = sum(r.computed for r in running)
        t, steps = self.now, 0
        while steps < k and (steps == 0 or t < deadline):
            context += seqs
            t += duration(seqs, seqs, context, 0)
            steps += 1
            if log is not None:
                log.append(StepShape(seqs, seqs, context, 0, t))
        finished: list[Request] = []
        for r in running:
            r.computed += steps
            r.generated += steps
            blocks = self._blocks_for(r.computed)
            self.free_blocks -= blocks - r.blocks
            r.blocks = blocks
            if r.generated >= r.output:
                r.finish = t
                self.free_blocks += r.blocks
                r.blocks = 0
                finished.append(r)
        if finished:
            self.running = [r for r in running if r.finish is None]
        self.now = t
        return finished

    def _admissible(self) -> bool:
        """Whether the head of the queue could be admitted after this step's decodes (while
        only decodes run, free blocks only shrink: a False stays False until a finish)."""
        if not self.waiting or len(self.running) >= self.cfg.max_num_seqs:
            return False
        budget = self.cfg.max_num_batched_tokens - len(self.running)
        r = self.waiting[0]
        n = r.prompt + r.generated - r.computed
        if budget <= 0 or (n > budget and not self.cfg.enable_chunked_prefill):
            return False
        return self._blocks_for(r.computed + min(n, budget)) - r.blocks <= self.free_blocks

    def _block_limited(self, k: int) -> int:
        """The most steps (<= k, <= one block's worth) whose new blocks fit the free pool."""
        bs = self.block
        k = min(k, bs)
        # Request r needs its next block at step `slack + 1` (slack: free slots it holds).
        counts = [0] * (bs + 1)
        for r in self.running:
            counts[min(bs, r.blocks * bs - r.computed)] += 1
        needed = 0
        for steps in range(1, k + 1):
            needed += counts[steps - 1]  # requests whose slack is below `steps`
            if needed > self.free_blocks:
                return steps - 1
        return k


def _shape(scheduled: list[tuple[Request, int]]) -> tuple[int, int, int, int]:
    """(tokens, seqs, context, prefill pairs) of a step: context counts the tokens attended,
    the step's own included."""
    tokens = context = pairs = 0
    for r, n in scheduled:
        tokens += n
        context += r.computed
        if n > 1:
            pairs += n * (r.computed + n // 2)
    return tokens, len(scheduled), context + tokens, pairs
