"""One trial's life: ask -> gate -> slot -> lease -> measure -> record.

The sampler proposes a config; the gate (`_gate.py`) may keep it from launching at no device
cost; the trial then claims one of the budget's slots (or gives the proposal back when other
workers filled the budget), leases its devices, is measured (with early stopping against the
front, where asked) and is recorded. A failed baseline or an engine that survived its teardown
ends the study; an OOM queues its repair (with `repair`). What the gate knows comes from the
study's trials: the OOMs, the configs that started, and the rules that deterministic failures
teach (`_learned.py`). The memory estimate reads the leased devices (`_room.py`): a config that
fits what the study has had there waits while other processes hold it, and an OOM while they
did is recorded `environment`, not learned as the config's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from autotune import store as keys
from autotune.answer.selection import pareto_front
from autotune.bench import RequestRecord, read_records
from autotune.devices import Lease, format_device_list, hold_host
from autotune.engine import EngineConfig
from autotune.measure import (
    FrontPoint,
    Judge,
    Measurement,
    PruneRule,
    make_judge,
    save_measurement,
)
from autotune.search import queue_remeasure, remeasure_on
from autotune.space import SearchSpace, SpaceError
from autotune.store import StudyStore, TrialFacts, TrialRecord, TrialSlots, Worker
from autotune.study._errors import StudyError
from autotune.study._events import Event, TrialFinished, TrialSkipped, TrialStarted
from autotune.study._gate import LAUNCH, DeviceRoom, Gate, Proposal, SkipRule, Verdict
from autotune.study._harness import Harness
from autotune.study._learned import LearnedRule, Tried, learned_rules
from autotune.study._record import Recorder
from autotune.study._room import Rooms
from autotune.study._screen import SCREENED_ROLES, Screen, predict_on, screen_on
from autotune.study._stages import stage_of
from autotune.study._trial_file import write_trial_record
from autotune.study._worker import worker_attr
from autotune.vocab import layout
from autotune.vocab.platform import Platform
from autotune.vocab.status import TrialStatus

_ASK_LOCK = threading.Lock()  # one `study.ask` at a time in this process


@dataclass(frozen=True)
class TrialOutcome:
    """How one proposal ended: launched and measured (`measurement`), kept from launching
    (`verdict`: by the gate or as a twin), settled by another worker meanwhile, or without a
    slot because other workers filled the budget first (`no_slot`)."""

    number: int
    measurement: Measurement | None = None
    verdict: Verdict | None = None
    no_slot: bool = False

    @property
    def launched(self) -> bool:
        return self.measurement is not None

    @property
    def skipped(self) -> bool:
        """Kept from launching or settled elsewhere: a proposal that used the skip budget."""
        return self.measurement is None and not self.no_slot


class TrialRunner:
    """Runs one proposal of a study through its life, on this machine's `harness`."""

    def __init__(
        self,
        harness: Harness,
        store: StudyStore,
        slots: TrialSlots,
        recorder: Recorder,
        run_token: str,
        emit: Callable[[Event], None],
    ) -> None:
        self.harness = harness
        self.spec = harness.spec
        self.store = store
        self.slots = slots
        self.recorder = recorder
        self.run_token = run_token
        self.emit = emit
        self.gate = Gate(
            harness.space,
            harness.model_info,
            config_of=harness.engine_config,
            devices=harness.machine.pool.size if harness.machine.pool is not None else 1,
            lanes=harness.machine.lanes,
        )
        self.rooms = Rooms(
            harness.machine.device_memory,
            harness.machine.memory_wait_s,
            harness.machine.memory_poll_s,
            harness.machine.cancel,
        )
        platform = harness.space.platform
        self.screen = Screen(self.spec, platform) if predict_on(self.spec) else None
        self.screen_on = screen_on(self.spec)
        # Per lane: set once its proposal holds a slot, or ended without claiming one (the
        # runner starts lanes in turn on these, so that queued configs claim in queue order).
        self.claimed = [threading.Event() for _ in range(max(1, harness.machine.lanes))]

    def run_one(self, study: optuna.Study, lane: int) -> TrialOutcome:
        """Ask for a config and run it."""
        try:
            with _ASK_LOCK:
                # Optuna pops a queued trial (the baseline, a retry) by reading then updating
                # its state, which SQLite does not lock: two lanes or runners of this process
                # asking at once could both get it. (Across processes: use PostgreSQL, see
                # docs/cluster.md.)
                trial = study.ask(self.harness.space.distributions())
            with self.store.heartbeat(trial._trial_id):
                try:
                    self.recorder.worker(trial, self._worker(lane))
                except optuna.exceptions.UpdateFinishedTrialError:
                    # taken for an orphan in the instant before it had a worker
                    return TrialOutcome(trial.number)
                return self._run(study, trial, lane)
        finally:
            self.claimed[lane].set()  # a proposal that never claimed

    def _worker(self, lane: int, devices: str | None = None) -> Worker:
        return worker_attr(self.run_token, self.harness.machine.host, devices, lane)

    def _run(self, study: optuna.Study, trial: Trial, lane: int) -> TrialOutcome:
        params = dict(trial.params)
        config = self.harness.engine_config(params)
        description = self.harness.space.describe(params)
        self.recorder.proposed(trial, description, config)
        stage = stage_of(self.harness, trial.user_attrs)
        if stage is not None:
            self.recorder.stage(trial, stage)
            description = f"{description} ({stage} stage)"
        # One read of the study per proposal: the gate's twins, OOMs and learned rules, and
        # the finished trials the engine model is fitted to.
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
        proposal = self._proposal(trial, config, trials)
        verdict = self._gate_verdict(study, trial, proposal)
        if verdict.launch:
            finished = [t for t in trials if t.state == TrialState.COMPLETE]
            verdict = self._screened(study, trial, config, finished)
        if not verdict.launch:
            return TrialOutcome(trial.number, verdict=verdict)
        slot = self.slots.claim(trial.number, self.spec.trials)
        self.claimed[lane].set()
        if slot is None:
            self.recorder.give_back(study, trial)
            return TrialOutcome(trial.number, no_slot=True)
        twin = self._slot_twin(study, trial)
        if twin is not None:  # another worker claimed the same config at the same moment
            self.slots.release(trial.number)
            reason = f"same config as trial {twin}"
            verdict = Verdict(TrialStatus.DUPLICATE, reason, SkipRule.DUPLICATE)
            self._skip(study, trial, verdict)
            return TrialOutcome(trial.number, verdict=verdict)
        trial_dir = layout.trial_dir(self.spec.study_dir, trial.number)
        lease, whole = None, None
        try:
            lease = self._lease(config)
            if lease is None:  # one trial at a time on the host's cores: all of them
                whole = hold_host(self.harness.machine.cancel)
            # The estimate reads the memory of the devices this trial got, now: another
            # lane's engine on another device is none of its business.
            verdict, room = self._memory_verdict(study, trial, proposal, lease)
            if not verdict.launch:
                self.slots.release(trial.number)
                return TrialOutcome(trial.number, verdict=verdict)
            self.recorder.slot(trial, slot)
            if lease is not None:
                config = self.harness.engine_config(params, lease)
                worker = self._worker(lane, format_device_list(lease.ids))
                self.recorder.leased(trial, lease.env, worker)
            write_trial_record(trial_dir, trial, self.harness.experiment())
            again = trial.user_attrs.get(keys.REMEASURE_OF)
            shown = description if again is None else f"{description} (again: trial {again})"
            self.emit(TrialStarted(trial.number, slot, self.spec.trials, shown))
            judge = self._judge(study, trial)
            baseline = trial.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE
            if baseline and self.harness.baseline_measure is not None:
                measurement = self.harness.baseline_measure(config, trial_dir)
            elif judge is None:
                measurement = self.harness.measure(config, trial_dir)
            else:
                measurement = self.harness.measure(config, trial_dir, judge=judge)
            measurement = self._attributed(measurement, proposal, room, trial_dir)
        except KeyboardInterrupt:
            self.recorder.interrupted(study, trial, trial_dir)
            self.slots.release(trial.number)
            reason = "stopped by user"
            self.emit(TrialSkipped(trial.number, TrialStatus.INTERRUPTED, reason))
            raise
        finally:
            if lease is not None:
                lease.release()
            if whole is not None:
                whole.release()
        self.recorder.measured(study, trial, measurement, trial_dir)
        self.emit(TrialFinished(trial.number, slot, self.spec.trials, measurement, study))
        self._after(study, trial, measurement, trial_dir)
        return TrialOutcome(trial.number, measurement)

    def _after(self, study: optuna.Study, trial: Trial, m: Measurement, trial_dir: Path) -> None:
        """What a recorded measurement means for the study: stop, or queue a repair."""
        if m.teardown_error:
            raise StudyError(
                f"trial {trial.number} was recorded, but its engine could not be cleared: "
                f"{m.teardown_error}; stopping so that no trial runs on a busy host"
            )
        if not m.ok and trial.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE:
            raise StudyError(
                f"the baseline trial (vLLM defaults) failed: {m.status}: "
                f"{m.reason} (log: {trial_dir / layout.ENGINE_LOG}); "
                "check the model, the host and the search space's baseline values"
            )
        if m.status == TrialStatus.OOM and self.spec.repair:
            self.recorder.queue_repair(study, trial, self.harness.space)
        elif remeasure_on(self.spec):
            queue_remeasure(study, self.spec)

    def _proposal(self, trial: Trial, config: EngineConfig, trials: list[FrozenTrial]) -> Proposal:
        """The proposal and what the study knows of it (`trials`: its complete and running
        ones)."""
        baseline = trial.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE
        again = trial.user_attrs.get(keys.ROLE) == keys.ROLE_REMEASURE  # its twin on purpose
        finished = [t for t in trials if t.state == TrialState.COMPLETE]
        return Proposal(
            dict(trial.params),
            config,
            baseline=baseline,
            # A failed baseline reruns; a re-measure runs a measured config again on purpose.
            twin=None if baseline or again else _measured_twin(trials, trial, self.harness.space),
            ooms=_known_ooms(finished),
            fits=[(t.number, t.params) for t in finished if _got_past_startup(t.user_attrs)],
            rules=self._rules(finished, baseline),
        )

    def _gate_verdict(self, study: optuna.Study, trial: Trial, proposal: Proposal) -> Verdict:
        """The gate's verdict on the proposal; one that keeps it from launching is recorded."""
        verdict = self.gate.check(proposal)  # the memory estimate: once devices are leased
        if verdict.launch:
            return verdict
        self._skip(study, trial, verdict)
        if proposal.baseline and verdict.status == TrialStatus.INVALID_CONFIG:
            raise StudyError(
                f"the baseline config breaks a known constraint: {verdict.reason}"
                " (fix the fixed options or the space's baseline values)"
            )
        return verdict

    def _screened(
        self, study: optuna.Study, trial: Trial, config: EngineConfig, finished: list[FrozenTrial]
    ) -> Verdict:
        """The engine model's prediction of the proposal, stored with it before it runs; the
        screening's verdict on a sampler's proposal (`_screen.py`). One that keeps it from
        launching is recorded, told the predicted values. `finished`: the study's complete
        trials (the measured ones the model is fitted to, the baseline, the feasible ones)."""
        if self.screen is None:
            return LAUNCH
        records = [TrialRecord.from_frozen(t) for t in finished]
        bounds = self.harness.bounds.values
        prediction = self.screen.predict(records, config.args, bounds)
        if prediction is None:
            return LAUNCH
        self.recorder.predicted(trial, prediction.stored())
        if not self.screen_on or trial.user_attrs.get(keys.ROLE, "") not in SCREENED_ROLES:
            return LAUNCH
        if trial.user_attrs.get(keys.STAGE) == keys.STAGE_LAYOUT:
            return LAUNCH  # the layout stage measures its layouts: that is what it is for
        verdict = self.screen.verdict(prediction, records, bounds)
        if verdict is None:
            return LAUNCH
        verdict = replace(verdict, predicted=prediction.summary)
        self._skip(study, trial, verdict)
        return verdict

    def _rules(self, finished: list[FrozenTrial], baseline: bool) -> list[LearnedRule]:
        """What the study's deterministic failures teach (nothing for the baseline: the gate
        would not use it)."""
        if baseline:
            return []
        return learned_rules(_tried(finished, self.harness.space))

    def _memory_verdict(
        self, study: optuna.Study, trial: Trial, p: Proposal, lease: Lease | None
    ) -> tuple[Verdict, DeviceRoom | None]:
        """The memory estimate's verdict on the trial's own devices (the baseline's is read,
        never judged), after waiting for memory other processes hold, and the room it read;
        one that keeps it from launching is recorded (a wait that ran out: `environment`)."""
        ids = (
            lease.ids if lease is not None and self.harness.space.platform != Platform.CPU else None
        )

        def judge(room: DeviceRoom | None) -> Verdict:
            return LAUNCH if p.baseline else self.gate.memory_verdict(p, room)

        verdict, room = self.rooms.wait(ids, judge, trial.number)
        if verdict.rule == SkipRule.BUSY:
            self.recorder.host_busy(study, trial, verdict)
            assert verdict.status is not None
            self.emit(TrialSkipped(trial.number, verdict.status, verdict.reason))
        elif not verdict.launch:
            self._skip(study, trial, verdict)
        return verdict, room

    def _attributed(
        self, m: Measurement, p: Proposal, room: DeviceRoom | None, trial_dir: Path
    ) -> Measurement:
        """`m`, an OOM that was the host's (`Gate.environment_oom`) recorded as `environment`
        (its folder's copy too), so that the search never learns it as the config's."""
        cause = (
            self.gate.environment_oom(p, room, m.reason) if m.status == TrialStatus.OOM else None
        )
        if cause is None:
            return m
        reason = f"out of memory, the host's fault: {cause} ({m.reason})"
        m = replace(m, status=TrialStatus.ENVIRONMENT, reason=reason)
        save_measurement(trial_dir, m)
        return m

    def _skip(self, study: optuna.Study, trial: Trial, verdict: Verdict) -> None:
        self.recorder.skipped(study, trial, verdict)
        assert verdict.status is not None
        self.emit(TrialSkipped(trial.number, verdict.status, verdict.reason))

    def _judge(self, study: optuna.Study, trial: Trial) -> Judge | None:
        """Early stopping for this trial (with `prune`): against the front as it is now.
        Never for the baseline (what users run today is measured in full), a re-measure (it
        runs a front config again to average its runs: judged against itself it would be cut short
        on a slower host) nor a capacity search (its levels are its own search)."""
        spec = self.spec
        total = self.harness.requests_per_run
        if not spec.prune or spec.capacity is not None or total <= 0:
            return None
        if trial.user_attrs.get(keys.ROLE) in (keys.ROLE_BASELINE, keys.ROLE_REMEASURE):
            return None
        objectives = [(o.metric, o.direction) for o in spec.objectives]
        records = [TrialRecord.from_frozen(t) for t in study.get_trials(deepcopy=False)]
        front = [
            FrontPoint(t.number, tuple(_local_records(t)))
            for t in pareto_front(records, objectives)
        ]
        rule = PruneRule(margin=spec.prune_margin)
        return make_judge(
            rule, objectives, front, self.harness.bounds.values, spec.max_error_rate, total
        )

    def _slot_twin(self, study: optuna.Study, trial: Trial) -> int | None:
        """Another running trial of the same config that holds a slot (checked after claiming,
        so that of two workers proposing one config at once, at most one runs it; finished
        ones are `_measured_twin`'s)."""
        holders = set(self.slots.held().values()) - {trial.number}
        for other in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if other.number in holders and other.params == trial.params:
                return other.number
        return None

    def _lease(self, config: EngineConfig) -> Lease | None:
        """The devices for `config` (tensor x pipeline parallel of them), once they are free."""
        pool = self.harness.machine.pool
        if pool is None:
            return None
        need = config.devices
        while True:
            try:
                return pool.acquire(need, timeout=0.5)
            except TimeoutError:
                if self.harness.machine.cancel.is_set():
                    raise KeyboardInterrupt from None


def _local_records(trial: TrialRecord) -> list[RequestRecord]:
    """A measured trial's request records, where its folder is on this machine (else none)."""
    if not trial.trial_dir:
        return []
    try:
        return read_records(Path(trial.trial_dir) / layout.REQUESTS)
    except (OSError, ValueError):
        return []


def _known_ooms(finished: list[FrozenTrial]) -> list[tuple[int, dict[str, object]]]:
    """(number, params) of the finished trials that ran out of memory on the device."""
    return [
        (t.number, t.params) for t in finished if t.user_attrs.get(keys.STATUS) == TrialStatus.OOM
    ]


def _tried(finished: list[FrozenTrial], space: SearchSpace) -> list[Tried]:
    """The study's finished trials as the learned rules see them: by the values that were set
    (a value `only_if` left out cannot be what failed)."""
    return [
        Tried(
            t.number,
            space.effective(t.params),
            str(t.user_attrs.get(keys.STATUS, "")),
            str(t.user_attrs.get(keys.REASON) or ""),
            started=_got_past_startup(t.user_attrs),
        )
        for t in finished
    ]


def _got_past_startup(attrs: dict[str, object]) -> bool:
    """Measured, or failed after the engine was ready: metrics were recorded (a benchmark
    that completed no request), or the benchmark was aborted (the engine died, hung)."""
    if attrs.get(keys.STATUS) in (TrialStatus.OK, TrialStatus.PRUNED):
        return True
    aborted = TrialFacts.read(attrs.get(keys.ENGINE)).abort is not None
    return attrs.get(keys.METRICS) is not None or aborted


def _measured_twin(trials: list[FrozenTrial], trial: Trial, space: SearchSpace) -> int | None:
    """A trial of the same config that was measured, or that holds a slot and runs now (the
    same config: the same engine options and variables, so values `only_if` leaves out and a
    derived choice equal to a number do not make another one)."""
    mine = _engine_of(space, trial.params)
    for other in trials:
        if other.number == trial.number or _engine_of(space, other.params) != mine:
            continue
        key = keys.DEVICE_S if other.state == TrialState.COMPLETE else keys.SLOT
        if other.user_attrs.get(key) is not None:
            return other.number
    return None


def _engine_of(space: SearchSpace, params: dict[str, Any]) -> object:
    """What `params` launch (options, env), or the params themselves where this space cannot
    make them (a trial of another version of it)."""
    try:
        return space.to_engine(params)
    except SpaceError:
        return params
