"""One trial's device work: start the engine, run the workload, tear down. Knows no Optuna.

The benchmark is guarded: it stops the moment the engine exits or logs a fatal error, when no
token streams for `hang_s` while requests are in flight, or when it overruns `deadline_s`. The
outcome is written to the trial folder (`measurement.json`, `_outcome`) before anyone records
it, so a measured trial survives a store that fails or a tuner that is killed right after it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from autotune.bench import (
    AbortKind,
    BenchmarkAborted,
    CapacitySearch,
    EngineCounters,
    Guard,
    LoadClientError,
    LoadClientName,
    LoadProfile,
    Precision,
    RequestRecord,
    RequestSpec,
    Timekeeping,
    spread,
    summarize,
)
from autotune.engine import (
    EngineConfig,
    EngineError,
    Failure,
    LaunchSettings,
    RunningEngine,
    TeardownError,
    launch,
    run_offline,
)
from autotune.measure._agreement import (
    AgreementError,
    Reference,
    agreement_of,
    greedy_outputs,
    write_outputs,
)
from autotune.measure._outcome import (
    Measurement,
    cut_short,
    save_measurement,
    summary_of,
    write_trial_records,
)
from autotune.measure._prune import Judge
from autotune.measure._runs import Runner, too_many_errors
from autotune.measure._turns import Turn
from autotune.store import Abort, Cost, TrialFacts
from autotune.vocab.status import TrialStatus

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Workplan:
    """What every trial runs: the same requests under the same load."""

    warmup: Sequence[RequestSpec]
    requests: Sequence[RequestSpec]
    profile: LoadProfile
    slos: Mapping[str, float]
    max_error_rate: float = 0.0
    hang_s: float | None = 120.0
    deadline_s: float | None = 1800.0
    capacity: CapacitySearch | None = None  # search the highest rate within the SLOs
    # Batches of the workload per trial on its one engine, at least (their requests pooled).
    repeats: int = 1
    # How far a trial's run goes for the precision its decision needs (bench/_precision.py);
    # None: `repeats` batches.
    precision: Precision | None = None
    scenario: str = "online"  # offline: the requests as one `vllm.LLM.generate` batch
    # The requests of the k-th run (k >= 1) on one engine (repeats, capacity levels): other
    # prompts of the same workload, so that the engine's prefix cache, filled by the run before,
    # does not serve them. None: every run sends `requests`.
    rerun: Callable[[int], Sequence[RequestSpec]] | None = None
    device_cost_per_hour: float | None = None  # then each trial's cost_per_mtok is measured
    load_client: LoadClientName = "autotune"  # who sends the measured requests (bench/_run.py)
    tokenizer: str | None = None  # the model's folder, for vllm-bench's prompt lengths
    # With --min-agreement: each trial's greedy outputs are compared with these, the baseline's
    # (measure/_agreement.py); None: not asked for.
    agreement: Reference | None = None
    # The tuner's lateness over the study's runs, which a stall must stand out of (one per
    # study: `dataclasses.replace` keeps it).
    timekeeping: Timekeeping = field(default_factory=Timekeeping, repr=False, compare=False)

    def client(self) -> dict[str, Any]:
        """`run_benchmark`'s keywords that pick the load client of the measured requests."""
        return {"client": self.load_client, "tokenizer": self.tokenizer}

    def requests_for(self, run: int) -> Sequence[RequestSpec]:
        """The measured requests of run `run` (0: the first) on one engine."""
        return self.requests if run == 0 or self.rerun is None else self.rerun(run)


class Measure(Protocol):
    """The device work of one trial; `judge` (early stopping) may end its benchmark early;
    `turn`: its batches alternate with other engines' (`Turns`; None: alone)."""

    def __call__(
        self,
        config: EngineConfig,
        trial_dir: Path,
        judge: Judge | None = None,
        turn: Turn | None = None,
    ) -> Measurement: ...


def measure(
    config: EngineConfig,
    trial_dir: Path,
    plan: Workplan,
    settings: LaunchSettings,
    clock: Callable[[], float] = time.monotonic,
    judge: Judge | None = None,
    turn: Turn | None = None,
) -> Measurement:
    """Launch `config`, run `plan` against it, and report; the engine is always torn down.

    `judge` stops the benchmark as soon as the requests so far decide the trial: it is then
    recorded as `pruned`, with the metrics of the requests it finished. `turn`: the engine is
    measured in turns with others (`Turns`), batch by batch; it leaves them however it ends."""
    try:
        if plan.scenario == "offline":
            return measure_offline(config, trial_dir, plan, settings, clock)
        return _measure_online(config, trial_dir, plan, settings, clock, judge, turn)
    finally:
        if turn is not None:
            turn.leave()


def _measure_online(
    config: EngineConfig,
    trial_dir: Path,
    plan: Workplan,
    settings: LaunchSettings,
    clock: Callable[[], float],
    judge: Judge | None,
    turn: Turn | None,
) -> Measurement:
    started = clock()
    result = Measurement(status=TrialStatus.OK)
    try:
        with launch(config, settings, trial_dir) as engine:
            result.engine = TrialFacts(
                startup_s=round(engine.startup_s, 2), **engine.facts.model_dump()
            )

            def probe() -> str | None:
                settings.check_cancel()  # raised out of the client's event loop, as Ctrl-C is
                return engine.probe()

            guard = Guard(probe=probe, hang_s=plan.hang_s, deadline_s=plan.deadline_s, judge=judge)
            counters = EngineCounters(engine.url)
            runner = Runner(
                engine.url, config.api_model_name, plan, guard, trial_dir, counters.start,
                turn, engine.cpu_s,
            )  # fmt: skip
            try:
                done = runner.run_plan()
            except LoadClientError as exc:  # the client itself failed: nothing was measured
                _fail(result, Failure(TrialStatus.BENCHMARK_ERROR, str(exc)))
            except BenchmarkAborted as aborted:
                write_trial_records(trial_dir, aborted.records)
                result.engine.abort = Abort.now(str(aborted.abort.kind), aborted.abort.reason)
                if aborted.abort.kind is AbortKind.PRUNED:  # the engine is fine: a normal stop
                    result.status, result.reason = TrialStatus.PRUNED, aborted.abort.reason
                    result.runs = [[r for r in aborted.records if not cut_short(r)]]
                    planned = len(aborted.records)
                    if _lived_through(result, engine, plan, result.runs, planned):
                        result.summary = summary_of(result, plan.slos)
                    raise _Pruned from None
                engine.mark_failed()
                if aborted.abort.kind is AbortKind.ENGINE:
                    _fail(result, engine.failure(TrialStatus.CRASH))
                else:
                    tail = engine.failure(TrialStatus.HANG, grace_s=0).log_tail
                    _fail(result, Failure(TrialStatus.HANG, aborted.abort.reason, tail))
            else:
                if turn is not None:  # nothing after the batches beside another's
                    turn.finish()
                write_trial_records(trial_dir, done.records)
                if _lived_through(result, engine, plan, done.runs or [done.records]):
                    result.engine.counters = counters.counted()
                    if plan.agreement is not None:  # after the counters: not measured traffic
                        _agree(result, engine.url, config.api_model_name, plan.agreement, trial_dir)
                    result.runs = done.runs or [done.records]
                    if len(done.runs) > 1:
                        summaries = [summarize(r, plan.slos) for r in done.runs]
                        result.spread = _finite(spread(summaries))
                        result.engine.repeats = len(done.runs)
                    result.engine.sized = runner.sized
                    result.engine.capacity = done.capacity
                    _cost(result, config, plan)
                    result.summary = summary_of(result, plan.slos)
            finally:
                result.engine.voided = list(runner.voided) or None
                result.engine.stall_kept_s = runner.stall_kept
                if turn is not None:
                    result.engine.turns = runner.turns_taken
                    result.engine.quiet_wait_s = round(runner.settled_s, 2)
    except EngineError as exc:
        _fail(result, exc.failure)
        if exc.startup_s is not None:
            result.engine.startup_s = round(exc.startup_s, 2)
    except _Pruned:
        pass
    except TeardownError as exc:
        logger.error("%s", exc)
        result.teardown_error = str(exc)
    result.device_s = round(clock() - started, 2)
    save_measurement(trial_dir, result)
    return result


def _lived_through(
    result: Measurement,
    engine: RunningEngine,
    plan: Workplan,
    runs: Sequence[Sequence[RequestRecord]],
    planned: int | None = None,
) -> bool:
    """Whether the trial counts: its engine still serves after the runs, and no more of their
    requests failed than the plan allows. Else the trial fails here, with its reason: a crash
    (the engine did not live through the run) or a benchmark error (too many failures)."""
    gone = engine.stopped_serving()
    if gone is not None:
        engine.mark_failed()
        result.engine.abort = Abort.now("engine", gone)
        failure = engine.failure(TrialStatus.CRASH)
        if failure.reason.startswith("no cause") or not failure.reason:
            failure = dataclasses.replace(failure, reason=gone)
        _fail(result, failure)
        return False
    errors = too_many_errors(runs, plan.max_error_rate, planned)
    if errors is not None:
        _fail(result, errors)
        return False
    return True


def _agree(
    result: Measurement, url: str, model: str, reference: Reference, trial_dir: Path
) -> None:
    """The engine's greedy outputs, kept, and compared with the baseline's where known; an
    engine that does not answer leaves the trial's agreement unknown (a warning)."""
    try:
        outputs = greedy_outputs(url, model)
    except AgreementError as exc:
        logger.warning("%s: %s", trial_dir.name, exc)
        return
    write_outputs(trial_dir, outputs)
    result.greedy = outputs
    if reference.outputs:
        result.agreement = agreement_of(reference.outputs, outputs)


def measure_offline(
    config: EngineConfig,
    trial_dir: Path,
    plan: Workplan,
    settings: LaunchSettings,
    clock: Callable[[], float] = time.monotonic,
) -> Measurement:
    """The offline scenario: `plan.requests` as one batch of `vllm.LLM(...).generate` in an
    isolated process tree (see `run_offline`); the same failure kinds as a server trial."""
    started = clock()
    result = Measurement(status=TrialStatus.OK)
    try:
        batch = run_offline(config, settings, trial_dir, plan.requests, plan.deadline_s, clock)
    except EngineError as exc:
        _fail(result, exc.failure)
        if exc.startup_s is not None:
            result.engine.startup_s = round(exc.startup_s, 2)
    except TeardownError as exc:
        logger.error("%s", exc)
        result.teardown_error = str(exc)
    else:
        write_trial_records(trial_dir, batch.records)
        result.engine = TrialFacts(
            startup_s=round(batch.startup_s, 2),
            generate_s=round(batch.generate_s, 3),
            peak_memory_bytes=batch.peak_memory_bytes,
            **batch.facts.model_dump(),
        )
        result.runs = [list(batch.records)]
        _cost(result, config, plan)
        result.summary = summary_of(result, plan.slos)
        if result.summary.completed == 0:
            first = next((r.error for r in batch.records if r.error), None)
            _fail(result, Failure(TrialStatus.BENCHMARK_ERROR, first or "no request completed"))
    result.device_s = round(clock() - started, 2)
    save_measurement(trial_dir, result)
    return result


class _Pruned(Exception):
    """The benchmark was stopped early by the judge (the engine is torn down normally)."""


def _finite(values: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in values.items() if math.isfinite(v)}


def _cost(result: Measurement, config: EngineConfig, plan: Workplan) -> None:
    """With a device cost, the trial's cost_per_mtok: its devices (tensor x pipeline parallel;
    on CPU the host counts as one device per worker) at the measured throughput."""
    if plan.device_cost_per_hour is None:
        return
    result.engine.cost = Cost(per_device_hour=plan.device_cost_per_hour, devices=config.devices)


def _fail(result: Measurement, failure: Failure) -> None:
    result.status = str(failure.kind)
    result.reason = failure.reason
    result.log_tail = failure.log_tail
    result.summary = None
