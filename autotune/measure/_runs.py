"""The benchmark runs of one trial on its one engine, and what makes a run count.

A plan runs once, `repeats` times, or level by level in a capacity search. A run counts only
if the tuner itself kept time through it: a stall of the tuner's own process (`StallWatch`)
voids the run, which is kept on disk and made again on other prompts of the workload, up to
`MAX_VOIDED` times; after that the host stalls in run after run, and the next run is kept
with the stall it had (`Runner.stall_kept`): voiding it again would measure nothing better. A
batch whose rate departs from the ones before it (`degraded`) is made again the same way; once
the batches are over, each is judged against all the others (`outlying`), and those that depart
leave the trial's metrics for voided/ (docs/metrics.md, "A degraded batch"). Once the runs are
over, the trial counts only if its engine lived through them and its failed requests are
within the study's bound (`verdict_after`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.bench import (
    AbortKind,
    BenchmarkAborted,
    LoadProfile,
    RequestRecord,
    StallWatch,
    Summary,
    batch_seconds,
    degraded,
    find_capacity,
    outlying,
    run_benchmark,
    sized,
    summarize,
    write_records,
)
from autotune.engine import Failure
from autotune.measure._objectives import constraint_values
from autotune.measure._turns import Turn, settle
from autotune.store import VoidedRun
from autotune.vocab import layout
from autotune.vocab.status import TrialStatus

logger = logging.getLogger(__name__)

MAX_VOIDED = 2  # runs voided per trial for each reason; then the next is kept, said so
# A remade run's prompts: the workload drawn again past every repeat's and level's index.
_VOID_DRAW = 1000


@dataclass
class PlanRuns:
    """What the runs of a plan gave: the records the trial is judged on (the median run; with
    a capacity search, the run that decided its level), the capacity search (as written to
    `capacity.json`; None without one), the records of repeated runs (empty for one run), and
    the runs voided by a stall of the tuner."""

    records: list[RequestRecord]
    capacity: dict[str, Any] | None = None
    runs: list[list[RequestRecord]] = field(default_factory=list)
    voided: list[VoidedRun] = field(default_factory=list)


class Runner:
    """Runs a plan's benchmarks against one engine: `url`, `model`, the plan (a `Workplan`),
    the guard, the trial folder, the hook called once a run's warm-up is over, and the engine's
    turn where it is measured in turns with others (`Turns`: its batches alternate with
    theirs; after each it hands over once the engine is quiet, read from `cpu_s`)."""

    def __init__(
        self,
        url: str,
        model: str,
        plan: Any,
        guard: Any,
        trial_dir: Path,
        before_measured: Callable[[], None],
        turn: Turn | None = None,
        cpu_s: Callable[[], float] | None = None,
    ) -> None:
        self.url, self.model, self.plan, self.guard = url, model, plan, guard
        self.trial_dir, self.before_measured = trial_dir, before_measured
        self.turn = turn  # with other engines measured in turns (`_turns.py`); None: alone
        self.cpu_s = cpu_s  # the engine's CPU seconds so far: it hands over its turn quiet
        self.settled_s = 0.0  # seconds waited, in all, for the engine to go quiet
        self.turns_taken = 0  # batches sent in turns
        self.voided: list[VoidedRun] = []
        self.sized: str | None = None  # why the batches ended (`bench.sized`)
        self.stall_kept: float | None = None  # the stall of a run kept after MAX_VOIDED

    def run_plan(self) -> PlanRuns:
        """The plan's benchmark: its requests at its load, in batches until it is precise
        enough for its decision (`plan.precision`; without: `repeats` batches), or, with a
        capacity search, at the highest rate that holds the SLOs."""
        plan = self.plan
        if plan.capacity is not None:
            return self._capacity()
        if plan.repeats <= 1 and plan.precision is None and self.turn is None:
            records = self.run(plan.warmup, plan.requests, plan.profile)
            return PlanRuns(records, voided=self.voided)
        return self._batches()

    def run(
        self,
        warmup: Sequence[Any],
        requests: Sequence[Any],
        profile: LoadProfile,
    ) -> list[RequestRecord]:
        """One run that counts: made again (warm engine, other prompts) while the tuner
        stalls in it. A run pruned by the judge on the strength of a stalled run is made
        again too; any other abort is the caller's."""
        while True:
            watch = StallWatch()
            try:
                records = run_benchmark(
                    self.url, self.model, warmup, requests, profile, guard=self.guard,
                    before_measured=self.before_measured, stalls=watch, **self.plan.client(),
                )  # fmt: skip
            except BenchmarkAborted as aborted:
                stall = watch.stall(self.plan.timekeeping)
                if aborted.abort.kind is not AbortKind.PRUNED or stall is None:
                    raise
                records = aborted.records
            else:
                stall = watch.stall(self.plan.timekeeping)
            if stall is None:
                return records
            if self._stalls() >= MAX_VOIDED:  # the host stalls run after run: keep, say so
                self.stall_kept = max(self.stall_kept or 0.0, round(stall.lag_s, 3))
                logger.warning("%s: run kept: %s", self.trial_dir.name, stall.reason)
                return records
            self._void(records, stall.lag_s, stall.limit_s, stall.reason)
            warmup, requests = (), self.plan.requests_for(_VOID_DRAW + len(self.voided))

    def _void(self, records: list[RequestRecord], lag_s: float, limit_s: float, why: str) -> None:
        name = self._keep_voided(records, why)
        self.voided.append(
            VoidedRun(stall_s=round(lag_s, 3), limit_s=round(limit_s, 3), records=name)
        )

    def _stalls(self) -> int:
        return sum(v.reason == "stall" for v in self.voided)

    def _keep_voided(self, records: list[RequestRecord], why: str) -> str:
        name = f"{layout.VOIDED_DIR}/{layout.run_records(len(self.voided))}"
        (self.trial_dir / layout.VOIDED_DIR).mkdir(parents=True, exist_ok=True)
        write_records(self.trial_dir / name, records)
        logger.warning("%s: run voided and made again: %s", self.trial_dir.name, why)
        return name

    def _batches(self) -> PlanRuns:
        """Batches of the workload on one engine (warm-up before the first; each batch its own
        prompts, `Workplan.requests_for`) until `sized` says the run has measured what its
        decision needs (at least `repeats` of them), or `repeats` batches without a
        precision. The judged records are the median batch's (`requests.jsonl`); the trial's
        metrics pool every batch (`measure.summary_of`)."""
        plan = self.plan
        folder = self.trial_dir / layout.RUNS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        runs: list[list[RequestRecord]] = []
        rates: list[float] = []
        attempts = 0  # batches sent, voided ones included: each draws prompts of its own
        out: list[int] = []
        while self._take_turn():  # False: ready, and no other engine is measuring
            k = len(runs)
            warmup = plan.warmup if k == 0 else ()
            records = self.run(warmup, plan.requests_for(attempts), plan.profile)
            attempts += 1
            rate = summarize(records, plan.slos).output_throughput
            if degraded([*rates, rate]) and self._degraded() < MAX_VOIDED:
                name = self._keep_voided(
                    records, f"degraded: its rate {rate:,.0f} departs from the batches before it"
                )
                self.voided.append(VoidedRun(records=name, reason="degraded"))
                self._end_turn(ready=False, seconds=batch_seconds(records))
                continue
            write_records(folder / layout.run_records(k), records)
            runs.append(records)
            rates.append(rate)
            out = outlying(rates)
            kept = [run for i, run in enumerate(runs) if i not in out]
            ended: str | None = None
            if plan.precision is None:
                ended = f"repeats: {len(runs)}" if len(runs) >= plan.repeats else None
            else:
                ended = sized(kept, plan.slos, plan.precision, plan.repeats, [runs[i] for i in out])
                self.sized = ended
            capped = ended is not None and ended.startswith("cap")
            if self._end_turn(ended is not None, capped, batch_seconds(records)):
                break
        runs = self._leave_out(runs, rates, out, folder)
        by_rate = sorted(runs, key=lambda run: summarize(run, plan.slos).output_throughput)
        return PlanRuns(by_rate[(len(runs) - 1) // 2], None, runs, self.voided)

    def _leave_out(
        self,
        runs: list[list[RequestRecord]],
        rates: Sequence[float],
        out: Sequence[int],
        folder: Path,
    ) -> list[list[RequestRecord]]:
        """The batches the trial is judged on: all but those that depart from the others
        (`outlying`, found once the batches are over, the first ones and those after the
        remakes ran out included), which move to voided/ as degraded; runs/ is renumbered.
        `out`: their indices, as the last batch's judgement found them."""
        if not out:
            return runs
        for i in out:
            why = f"degraded: its rate {rates[i]:,.0f} departs from the run's other batches"
            self.voided.append(
                VoidedRun(records=self._keep_voided(runs[i], why), reason="degraded")
            )
        kept = [run for i, run in enumerate(runs) if i not in out]
        for i in range(len(runs)):
            (folder / layout.run_records(i)).unlink(missing_ok=True)
        for i, run in enumerate(kept):
            write_records(folder / layout.run_records(i), run)
        return kept

    def _take_turn(self) -> bool:
        """Alone: always. In turns: wait for this engine's; False when it should end."""
        if self.turn is None:
            return True
        taken = self.turn.begin()
        self.turns_taken += taken
        return taken

    def _end_turn(self, ready: bool, final: bool = False, seconds: float = 0.0) -> bool:
        """Whether the batches end: alone, when `ready`; in turns, when every engine still
        measuring is ready too (or at a cap, `final`). In turns, a batch of `seconds` keeps the
        turn while it has held less than `Turns.turn_s`; else the turn passes on, once the
        engine is quiet (unless no other engine is measuring)."""
        if self.turn is None:
            return ready
        if not ready and not final and self.turn.keep(seconds):
            return False
        if self.cpu_s is not None and not self.turn.alone():
            self.settled_s += settle(self.cpu_s)
        return self.turn.end(ready, final)

    def _degraded(self) -> int:
        return sum(v.reason == "degraded" for v in self.voided)

    def _capacity(self) -> PlanRuns:
        plan = self.plan
        runs: list[tuple[Summary, list[RequestRecord]]] = []
        (self.trial_dir / layout.LEVELS_DIR).mkdir(parents=True, exist_ok=True)

        def run(profile: LoadProfile) -> Summary:
            warmup = plan.warmup if not runs else ()
            records = self.run(warmup, plan.requests_for(len(runs)), profile)
            folder = self.trial_dir / layout.LEVELS_DIR
            write_records(folder / layout.run_records(len(runs)), records)
            summary = summarize(records, plan.slos)
            runs.append((summary, records))
            return summary

        def holds(summary: Summary) -> bool:
            """Feasible as a trial is: the same constraints (SLOs, error rate) at or below 0."""
            values = constraint_values(summary, plan.slos, plan.max_error_rate)
            return summary.completed > 0 and all(v <= 0 for v in values.values())

        capacity = find_capacity(run, plan.profile, holds, plan.capacity)
        search = capacity.to_dict()
        (self.trial_dir / layout.CAPACITY).write_text(json.dumps(search, indent=1))
        chosen = next(records for summary, records in runs if summary is capacity.summary)
        return PlanRuns(chosen, search, [], self.voided)


def too_many_errors(
    runs: Sequence[Sequence[RequestRecord]], max_error_rate: float, planned: int | None = None
) -> Failure | None:
    """A `benchmark_error` where more of the measured requests failed than the study allows
    (`max_error_rate`): such a run measured the failures, not the config's service. `planned`:
    the requests the run was to send, where it stopped early (pruned)."""
    failed = [r for run in runs for r in run if not r.ok]
    total = planned if planned is not None else sum(len(run) for run in runs)
    if not total or len(failed) / total <= max_error_rate:
        return None
    first = failed[0].error or "failed"
    return Failure(
        TrialStatus.BENCHMARK_ERROR,
        f"{len(failed)} of {total} requests failed (first: {first}), more than the study's "
        f"max_error_rate of {max_error_rate:g} allows",
    )
