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

`Scheduler` is driven by `simulate` (with `fast_forward` to fuse pure-decode steps) and by the
server in real time (one `plan` / `commit` per step); both therefore see the same schedule.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .model import Hardware, MemoryPlan, SimConfig, step_cost, step_time


class Request:
    """One request's progress; times in simulated seconds."""

    __slots__ = (
        "arrival",
        "blocks",
        "computed",
        "finish",
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


@dataclass
class Step:
    """A planned step: (request, new tokens) pairs and its duration."""

    scheduled: list[tuple[Request, int]]
    duration: float


class Scheduler:
    def __init__(self, hw: Hardware, cfg: SimConfig, memory: MemoryPlan) -> None:
        self.cfg = cfg
        self.cost = step_cost(hw, cfg)
        self.block = cfg.block_size
        self.free_blocks = memory.num_blocks
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.now = 0.0
        self.preemptions = 0

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
        return Step(scheduled, self._duration(scheduled))

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

    def _duration(self, scheduled: list[tuple[Request, int]]) -> float:
        tokens = context = pairs = 0
        for r, n in scheduled:
            tokens += n
            context += r.computed
            if n > 1:
                pairs += n * (r.computed + n // 2)
        return step_time(self.cost, tokens, len(scheduled), context + tokens, pairs)

    def commit(self, step: Step, end: float) -> list[Request]:
        """Apply a planned step that ended at `end`; the requests that got a token."""
        emitted: list[Request] = []
        done = False
        for r, n in step.scheduled:
            r.computed += n
            if r.computed == r.prompt + r.generated:
                r.generated += 1
                emitted.append(r)
                if r.first_token is None:
                    r.first_token = end
                if r.generated >= r.output:
                    r.finish = end
                    self.free_blocks += r.blocks
                    r.blocks = 0
                    done = True
        if done:
            self.running = [r for r in self.running if r.finish is None]
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
        if any(r.computed != r.prompt + r.generated - 1 for r in running):
            return None
        k = min(r.output - r.generated for r in running)
        k = self._block_limited(k)
        if k < 2:
            return None
        seqs = len(running)
        base = step_time(self.cost, seqs, seqs, 0, 0)
        per_ctx = self.cost.kv_read_s_per_token
        context = sum(r.computed for r in running)
        t, steps = self.now, 0
        while steps < k and (steps == 0 or t < deadline):
            context += seqs
            t += base + per_ctx * context
            steps += 1
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
