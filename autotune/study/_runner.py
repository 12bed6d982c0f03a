"""The tuning loop: ask Optuna for a config, check it, measure it, record it, repeat.

Lifecycle of a trial: proposed -> checked (hard constraints, known OOMs, the memory estimate:
an impossible config is never started) -> launched -> measured -> recorded. Failures are
recorded with their kind and the study goes on, except when the baseline fails (the host or the
model is at fault) or an engine survives its teardown (the next trial would run on a busy host).

An OOM teaches the search twice: Optuna sees a complete trial with worst-case values and a
positive `oom` constraint, and every later proposal that needs at least the memory of a known
OOM config is recorded as `predicted_oom` without a launch. With `repair`, an OOM trial is
retried once, one step back towards what is known to fit, as a trial linked to it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import statistics
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from autotune import layout
from autotune import store as keys
from autotune.bench import METRIC_NAMES, RequestRecord, read_records
from autotune.devices import DeviceMemory, DevicePool, Lease, format_device_list
from autotune.engine import (
    EngineConfig,
    reap_stale_engine,
    resolve_env,
    to_yaml_dict,
)
from autotune.host import describe_host
from autotune.space import (
    ModelInfo,
    SearchSpace,
    SpaceError,
    allocated_bytes,
    check_constraints,
    comparable,
    dominating_oom,
    estimate_memory,
    repair,
)
from autotune.spec import TuneSpec
from autotune.status import TrialStatus
from autotune.store import (
    StorageError,
    StudyStore,
    TrialRecord,
    default_storage_url,
    storage_errors,
)
from autotune.study._events import Event, TrialFinished, TrialSkipped, TrialStarted
from autotune.study._measure import (
    Measure,
    Measurement,
    load_measurement,
)
from autotune.study._objectives import constraint_values, objective_values
from autotune.study._prune import FrontPoint, Judge, PruneRule, make_judge
from autotune.study._select import pareto_front, study_objectives
from autotune.study._worker import end_run, is_dead_here, is_here, new_run, worker_attr

logger = logging.getLogger(__name__)

SPEC_ATTR = "spec"  # the study attribute holding TuneSpec.shared(): what workers run
_ASK_LOCK = threading.Lock()  # one `study.ask` at a time in this process
SKIP_LIMIT_FACTOR = 10  # proposals that are skipped (invalid, duplicate) per trial of budget


NO_SLOT = "no slot"  # a proposal that found every slot of the budget taken
Outcome = tuple[int, Measurement] | None | str


class StudyError(Exception):
    """The study cannot go on; the message says why, for the user."""


@dataclass
class StudyResult:
    name: str
    measured: int = 0
    failed: int = 0
    skipped: int = 0
    device_s: float = 0.0
    failed_device_s: float = 0.0
    exhausted: bool = False
    interrupted: bool = False
    trial_numbers: list[int] = field(default_factory=list)
    pruned: int = 0  # stopped early (see autotune.study._prune); counted apart from failures
    pruned_device_s: float = 0.0
    ok_device_s: list[float] = field(default_factory=list)  # of the fully measured trials

    @property
    def saved_device_s(self) -> float:
        """Device seconds early stopping saved, estimated: a pruned trial would have taken
        as long as the median fully measured trial of this run."""
        if not self.pruned or not self.ok_device_s:
            return 0.0
        full = statistics.median(self.ok_device_s)
        return max(0.0, self.pruned * full - self.pruned_device_s)


def make_sampler(spec: TuneSpec, offset: int = 0) -> optuna.samplers.BaseSampler:
    """The spec's sampler, seeded with `spec.seed + offset` (a resumed study passes the number
    of trials it has, so that it does not propose its first configs again)."""
    seed = spec.seed + offset
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.TPESampler(
        seed=seed, multivariate=True, constant_liar=True, n_startup_trials=4
    )


class StudyRunner:
    """Runs one study to its budget. `measure` does the device work of one trial.

    `device_memory` says what memory a trial's device has now (None: unknown, no estimate).
    `learn_failures=False` records failures as FAILED trials and predicts nothing: the naive
    way, kept only so that benchmarks can compare against it.

    With a device `pool`, each trial leases its devices from it (tensor x pipeline parallel of
    them) and sees only those; `lanes` trials run at once. Other workers (other processes,
    other machines) may run the same study at the same time: the budget's slots, heartbeats
    and the recovery of orphaned trials keep them from running more than `trials`, twice the
    same trial, or leaving a dead worker's trial behind. Setting `cancel` stops every lane as
    Ctrl-C does. `join`: this runner joins a study others run (`autotune worker`); its
    sampler is seeded apart from theirs. With the spec's `prune`, a trial's benchmark of
    `requests_per_run` requests is stopped once it is decided (see `autotune.study._prune`).
    """

    def __init__(
        self,
        spec: TuneSpec,
        space: SearchSpace,
        store: StudyStore,
        measure: Measure,
        on_event: Callable[[Event], None] = lambda event: None,
        device_memory: Callable[[], DeviceMemory | None] = lambda: None,
        learn_failures: bool = True,
        pool: DevicePool | None = None,
        lanes: int = 1,
        cancel: threading.Event | None = None,
        poll_s: float = 2.0,
        join: bool = False,
        requests_per_run: int = 0,
    ) -> None:
        if lanes < 1:
            raise ValueError(f"lanes must be >= 1, not {lanes}")
        self.spec = spec
        self.space = space
        self.store = store
        self.measure = measure
        self.emit = on_event
        self.device_memory = device_memory
        self.learn_failures = learn_failures
        self.model_info = ModelInfo.from_path(spec.model)
        self.directions = [o.direction for o in spec.objectives]
        self.pool = pool
        self.lanes = lanes
        self.cancel = cancel or threading.Event()
        self.poll_s = poll_s
        self.join = join
        self.requests_per_run = requests_per_run  # measured requests of one run (early stopping)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._skips_left = 0
        self._run_token = ""

    def run(self) -> StudyResult:
        study, created = self.store.create_or_load(
            self.spec.study, self.directions, make_sampler(self.spec)
        )
        if created:
            self._initialize(study)
        else:
            self._check_same_experiment(study)
            offset = len(study.get_trials(deepcopy=False))
            if self.join:
                # Workers that start together must not propose the same configs.
                offset += int(uuid.uuid4().int % 1_000_000)
            study.sampler = make_sampler(self.spec, offset=offset)
        study.set_user_attr(SPEC_ATTR, self._shared_spec())
        self._slots = self.store.slots(study)
        self._slots.adopt(self._measured_numbers(study))
        self._run_token = new_run()
        try:
            self._recover_interrupted(study)
            if not created:
                self._retry_failed_baseline(study)
            result = StudyResult(name=self.spec.study)
            self._skips_left = SKIP_LIMIT_FACTOR * self.spec.trials
            if self.lanes == 1:
                try:
                    self._lane(study, result, 0)
                except KeyboardInterrupt:
                    result.interrupted = True
            else:
                self._run_lanes(study, result)
        finally:
            end_run(self._run_token)
        return result

    def _run_lanes(self, study: optuna.Study, result: StudyResult) -> None:
        """Run `lanes` trials at a time, each lane in a thread of its own.

        A lane's engine is started and torn down by that thread (the engine's parent-death
        signal follows the thread that started it). Ctrl-C or SIGTERM in the main thread
        cancels every lane: each tears its engine down and records its trial as interrupted.
        An error in one lane lets the others finish their trial, then ends the study with it.
        """
        errors: list[BaseException] = []

        def lane(k: int) -> None:
            try:
                self._lane(study, result, k)
            except KeyboardInterrupt:  # cancelled
                with self._lock:
                    result.interrupted = True
            except BaseException as exc:
                with self._lock:
                    errors.append(exc)
                self._stop.set()

        threads = [
            threading.Thread(target=lane, args=(k,), name=f"lane-{k}") for k in range(self.lanes)
        ]
        for thread in threads:
            thread.start()
        try:
            while any(thread.is_alive() for thread in threads):
                for thread in threads:
                    thread.join(timeout=0.2)
        except KeyboardInterrupt:
            result.interrupted = True
            self._stop.set()
            self.cancel.set()
            for thread in threads:
                thread.join()
        if errors:
            raise errors[0]

    def _lane(self, study: optuna.Study, result: StudyResult, lane: int) -> None:
        """Run trials until every slot of the budget is held by a finished trial.

        While the last slots are held by trials running elsewhere, the lane waits: if their
        worker dies, their slots come free and this lane runs them.
        """
        while not self._stop.is_set():
            self._recover_interrupted(study)
            held = self._slots.held()
            if len(held) >= self.spec.trials:
                if not self._any_running(study, set(held.values())):
                    return
                self._stop.wait(self.poll_s)
                continue
            with self._lock:
                if self._skips_left <= 0:
                    result.exhausted = True
                    return
            outcome = self._one_trial(study, lane)
            with self._lock:
                if outcome is None:
                    result.skipped += 1
                    self._skips_left -= 1
                    continue
                if outcome is NO_SLOT:
                    continue
                assert isinstance(outcome, tuple)
                number, measurement = outcome
                result.trial_numbers.append(number)
                result.device_s += measurement.device_s
                if measurement.status == TrialStatus.PRUNED:
                    result.pruned += 1
                    result.pruned_device_s += measurement.device_s
                    continue
                result.measured += measurement.ok
                result.failed += not measurement.ok
                result.failed_device_s += 0.0 if measurement.ok else measurement.device_s
                if measurement.ok:
                    result.ok_device_s.append(measurement.device_s)

    @staticmethod
    def _any_running(study: optuna.Study, numbers: set[int]) -> bool:
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return any(t.number in numbers for t in running)

    def _shared_spec(self) -> dict[str, Any]:
        """The spec that `autotune worker` runs on other machines: paths made absolute."""
        data = self.spec.shared()
        data["model"] = _model_ref(self.spec.model)
        data["space"] = _model_ref(self.spec.space)  # a space file's path; a shipped name as is
        return data

    def _experiment(self) -> dict[str, Any]:
        """What makes trials comparable: a study continues only with the same values."""
        spec = self.spec
        return {
            "model": _model_ref(spec.model),
            "space": self.space.name,
            "workload": spec.workload.model_dump(mode="json"),
            "load": spec.load.model_dump(mode="json"),
            "slos": spec.slos,
            "max_error_rate": spec.max_error_rate,
            "capacity": spec.capacity.model_dump() if spec.capacity else None,
            "scenario": spec.scenario,
        }

    def _baseline_params(self) -> dict[str, Any]:
        """Trial 0: the spec's (imported from what the user runs today) or the space's."""
        return dict(self.spec.baseline) if self.spec.baseline else self.space.baseline_params()

    def _check_same_experiment(self, study: optuna.Study) -> None:
        stored = study.user_attrs
        for key, value in _jsonable(self._experiment()).items():
            if key in stored and stored[key] != value:
                raise StudyError(
                    f"study {self.spec.study!r} was run with {key} {stored[key]!r}, not "
                    f"{value!r}; its trials would not be comparable: use another --study name"
                )

    def _initialize(self, study: optuna.Study) -> None:
        spec = self.spec
        attrs: dict[str, Any] = {
            **self._experiment(),
            "served_model_name": spec.api_model_name,
            "platform": self.space.platform,
            "objectives": [o.model_dump() for o in spec.objectives],
            "host": describe_host(),
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        for key, value in _jsonable(attrs).items():
            study.set_user_attr(key, value)
        study.enqueue_trial(
            self._baseline_params(),
            user_attrs={keys.ROLE: keys.ROLE_BASELINE},
            skip_if_exists=True,
        )
        if spec.warm_start:
            self._warm_start(study, spec.warm_start)

    def _warm_start(self, study: optuna.Study, other: str) -> None:
        """Queue the Pareto configs of study `other` (after the baseline): a new study on the
        same model and hardware starts from what an earlier one found."""
        url = self.spec.storage or default_storage_url(self.spec.root, other)
        source = StudyStore(url, create=False)
        attrs = source.study_attrs(other)
        if attrs.get("space") != self.space.name:
            raise StudyError(
                f"--warm-start {other}: it searched space {attrs.get('space')!r}, not "
                f"{self.space.name!r}; its configs are not points of this space"
            )
        if attrs.get("model") != _model_ref(self.spec.model):
            logger.warning("--warm-start %s tuned model %s", other, attrs.get("model"))
        front = pareto_front(source.trials(other), study_objectives(attrs))
        queued = 0
        for trial in front:
            try:
                self.space.to_engine(trial.params)  # a point of this space, whole
            except SpaceError:
                continue
            origin = {keys.ROLE: keys.ROLE_WARM_START, keys.WARM_FROM: f"{other}#{trial.number}"}
            study.enqueue_trial(trial.params, user_attrs=origin, skip_if_exists=True)
            queued += 1
        logger.info("--warm-start %s: %d of %d Pareto configs queued", other, queued, len(front))

    def _recover_interrupted(self, study: optuna.Study) -> None:
        """Settle the trials whose worker is gone (killed tuner, dead machine).

        A trial is orphaned when its worker's process on this host is gone, when its heartbeat
        is older than the store's `stale_after_s`, or when it has had no worker for as long (left
        by an older version). On this host its engine, if still alive, is ended, and a trial whose
        measurement reached its folder is recorded from there (it was measured; only the store
        never heard of it). Any other is marked interrupted, gives its slot back and is queued
        again, once. Two workers settling one trial: the first wins, the second skips it.
        """
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return
        stale = self.store.stale_trial_ids(study)
        for trial in running:
            worker = trial.user_attrs.get(keys.WORKER)
            if worker is None:
                # Asked an instant ago by a worker about to record itself, or left by an older
                # version: only the second is old.
                started = trial.datetime_start or dt.datetime.now()
                if (dt.datetime.now() - started).total_seconds() < self.store.stale_after_s:
                    continue
            elif trial._trial_id not in stale and not is_dead_here(worker):
                continue
            try:
                self._settle_orphan(study, trial, local=worker is None or is_here(worker))
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # settled by another worker meanwhile

    def _settle_orphan(self, study: optuna.Study, trial: FrozenTrial, local: bool) -> None:
        storage = self.store.storage
        trial_dir = self._trial_dir(trial.number)
        if local:
            reap_stale_engine(trial_dir)
            saved = load_measurement(trial_dir, self.spec.slos)
            if saved is not None:
                logger.warning("recording trial %d from %s", trial.number, trial_dir)
                self._record(study, Trial(study, trial._trial_id), saved, trial_dir)
                return
        logger.warning("trial %d was left running by a worker that is gone", trial.number)
        storage.set_trial_user_attr(trial._trial_id, keys.STATUS, str(TrialStatus.INTERRUPTED))
        if not storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
            return
        self._slots.release(trial.number)
        if not trial.user_attrs.get(keys.REQUEUED):
            attrs = {k: v for k, v in trial.user_attrs.items() if k in (keys.ROLE, keys.REPAIR_OF)}
            study.enqueue_trial(trial.params, user_attrs={**attrs, keys.REQUEUED: True})

    def _trial_dir(self, number: int) -> Path:
        return layout.trial_dir(self.spec.study_dir, number)

    def _retry_failed_baseline(self, study: optuna.Study) -> None:
        """A resumed study whose baseline failed runs the baseline again first: without it the
        study would go on with no reference, or on a host that cannot serve the model at all."""
        baselines = [
            t
            for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE
        ]
        pending = (TrialState.WAITING, TrialState.RUNNING)
        if baselines and not any(
            t.state in pending or t.user_attrs.get(keys.STATUS) == TrialStatus.OK for t in baselines
        ):
            study.enqueue_trial(self._baseline_params(), user_attrs={keys.ROLE: keys.ROLE_BASELINE})

    @staticmethod
    def _measured_numbers(study: optuna.Study) -> list[int]:
        """Trials that count against the budget: launched ones, whatever their outcome."""
        finished = (TrialState.COMPLETE, TrialState.FAIL)
        return [
            t.number
            for t in study.get_trials(deepcopy=False, states=finished)
            if t.user_attrs.get(keys.DEVICE_S) is not None
        ]

    def _one_trial(self, study: optuna.Study, lane: int) -> Outcome:
        """Ask for a config and run it: (number, measurement), None when it was skipped (never
        launched), NO_SLOT when other workers filled the budget first."""
        with _ASK_LOCK:
            # Optuna pops a queued trial (the baseline, a retry) by reading then updating its
            # state, which SQLite does not lock: two lanes or runners of this process asking at
            # once could both get it. (Across processes: use PostgreSQL, see docs/cluster.md.)
            trial = study.ask(self.space.distributions())
        with self.store.heartbeat(trial._trial_id):
            try:
                trial.set_user_attr(keys.WORKER, worker_attr(self._run_token, lane=lane))
            except optuna.exceptions.UpdateFinishedTrialError:
                return None  # taken for an orphan in the instant before it had a worker
            return self._run_trial(study, trial, lane)

    def _run_trial(self, study: optuna.Study, trial: Trial, lane: int) -> Outcome:
        params = dict(trial.params)
        config = self._engine_config(params)
        description = self.space.describe(params)
        trial.set_user_attr(keys.DESCRIPTION, description)
        trial.set_user_attr(keys.CONFIG, to_yaml_dict(config))
        trial.set_user_attr(keys.ENV, config.env)
        if self._skip_reason(study, trial, config):
            return None
        slot = self._slots.claim(trial.number, self.spec.trials)
        if slot is None:
            self._give_back(study, trial)
            return NO_SLOT
        twin = self._slot_twin(study, trial)
        if twin is not None:  # another worker claimed the same config at the same moment
            self._slots.release(trial.number)
            self._tell_skipped(study, trial, TrialStatus.DUPLICATE, f"same config as trial {twin}")
            return None
        trial.set_user_attr(keys.SLOT, slot)
        trial_dir = self._trial_dir(trial.number)
        lease = None
        try:
            lease = self._lease(config)
            if lease is not None:
                config = self._engine_config(params, lease)
                trial.set_user_attr(keys.ENV, config.env)
                devices = format_device_list(lease.ids)
                trial.set_user_attr(keys.WORKER, worker_attr(self._run_token, devices, lane))
            self.emit(TrialStarted(trial.number, slot, self.spec.trials, description))
            judge = self._judge(study, trial)
            if judge is None:
                measurement = self.measure(config, trial_dir)
            else:
                measurement = self.measure(config, trial_dir, judge=judge)
        except KeyboardInterrupt:
            trial.set_user_attr(keys.STATUS, str(TrialStatus.INTERRUPTED))
            trial.set_user_attr(keys.TRIAL_DIR, str(trial_dir))
            study.tell(trial, state=TrialState.FAIL)
            self._slots.release(trial.number)
            reason = "stopped by user"
            self.emit(TrialSkipped(trial.number, str(TrialStatus.INTERRUPTED), reason))
            raise
        finally:
            if lease is not None:
                lease.release()
        self._record_or_keep(study, trial, measurement, trial_dir)
        self.emit(TrialFinished(trial.number, slot, self.spec.trials, measurement, study))
        if measurement.teardown_error:
            raise StudyError(
                f"trial {trial.number} was recorded, but its engine could not be cleared: "
                f"{measurement.teardown_error}; stopping so that no trial runs on a busy host"
            )
        if not measurement.ok and trial.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE:
            raise StudyError(
                f"the baseline trial (vLLM defaults) failed: {measurement.status}: "
                f"{measurement.reason} (log: {trial_dir / layout.ENGINE_LOG}); "
                "check the model, the host and the search space's baseline values"
            )
        if measurement.status == TrialStatus.OOM and self.spec.repair and self.learn_failures:
            self._enqueue_repair(study, trial)
        return trial.number, measurement

    def _judge(self, study: optuna.Study, trial: Trial) -> Judge | None:
        """Early stopping for this trial (with `prune`): against the front as it is now.
        Never for the baseline (what users run today is measured in full) nor a capacity
        search (its levels are its own search)."""
        spec = self.spec
        if not spec.prune or spec.capacity is not None or self.requests_per_run <= 0:
            return None
        if trial.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE:
            return None
        objectives = [(o.metric, o.direction) for o in spec.objectives]
        records = [TrialRecord.from_frozen(t) for t in study.get_trials(deepcopy=False)]
        front = [
            FrontPoint(t.number, tuple(_local_records(t)))
            for t in pareto_front(records, objectives)
        ]
        rule = PruneRule(margin=spec.prune_margin)
        total = self.requests_per_run
        return make_judge(rule, objectives, front, spec.slos, spec.max_error_rate, total)

    def _slot_twin(self, study: optuna.Study, trial: Trial) -> int | None:
        """Another running trial of the same config that holds a slot (checked after claiming,
        so that of two workers proposing one config at once, at most one runs it; finished
        ones are `_measured_twin`'s)."""
        holders = set(self._slots.held().values()) - {trial.number}
        for other in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if other.number in holders and other.params == trial.params:
                return other.number
        return None

    def _lease(self, config: EngineConfig) -> Lease | None:
        """The devices for `config` (tensor x pipeline parallel of them), once they are free."""
        if self.pool is None:
            return None
        args = config.args
        need = int(args.get("tensor_parallel_size", 1)) * int(args.get("pipeline_parallel_size", 1))
        while True:
            try:
                return self.pool.acquire(need, timeout=0.5)
            except TimeoutError:
                if self.cancel.is_set():
                    raise KeyboardInterrupt from None

    def _give_back(self, study: optuna.Study, trial: Trial) -> None:
        """End a proposal that found the budget full (another worker took the last slot); a
        queued config (baseline, repair, retry) goes back in the queue for whoever runs next."""
        trial.set_user_attr(keys.STATUS, TrialStatus.UNUSED)
        trial.set_user_attr(keys.REASON, "the budget was filled by other workers first")
        study.tell(trial, state=TrialState.FAIL)
        if "fixed_params" in study._storage.get_trial_system_attrs(trial._trial_id):
            attrs = {
                k: v
                for k, v in trial.user_attrs.items()
                if k in (keys.ROLE, keys.REPAIR_OF, keys.REQUEUED)
            }
            study.enqueue_trial(trial.params, user_attrs=attrs)

    def _record_or_keep(
        self, study: optuna.Study, trial: Trial, m: Measurement, trial_dir: Path
    ) -> None:
        """Record a measured trial; if the store fails, say where the measurement is kept."""
        try:
            with storage_errors(self.store.url):
                self._record(study, trial, m, trial_dir)
        except StorageError as exc:
            raise StudyError(
                f"trial {trial.number} was measured but could not be recorded ({exc}); its "
                f"measurement is kept in {trial_dir / layout.MEASUREMENT} and is recorded when "
                "the study is continued (run the same command again)"
            ) from exc

    def _enqueue_repair(self, study: optuna.Study, trial: Trial) -> None:
        """Queue the OOM config one step back towards what fits (once: never a repair's)."""
        if trial.user_attrs.get(keys.ROLE) == keys.ROLE_REPAIR:
            return
        fits = [
            t.params
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get(keys.STATUS) == TrialStatus.OK
        ]
        params = repair(self.space, trial.params, fits)
        if params is None:
            logger.info("trial %d ran out of memory and no knob can be turned down", trial.number)
            return
        study.enqueue_trial(
            params, user_attrs={keys.ROLE: keys.ROLE_REPAIR, keys.REPAIR_OF: trial.number}
        )

    def _engine_config(self, params: dict[str, Any], lease: Lease | None = None) -> EngineConfig:
        """The engine config of `params`; with a lease, shown only the leased devices (on CPU:
        its workers bound to the leased cores, whatever binding the space chose)."""
        if lease is None:
            return trial_engine_config(self.spec, self.space, params)
        cores = None
        if self.pool is not None and self.pool.platform == "cpu":
            cores = lease.env["VLLM_CPU_OMP_THREADS_BIND"]
        return trial_engine_config(self.spec, self.space, params, lease.env, cores)

    def _skip_reason(self, study: optuna.Study, trial: Trial, config: EngineConfig) -> bool:
        """Record, at no device cost, a proposal that must not be launched."""
        devices = self.pool.size if self.pool is not None else 1
        problems = check_constraints(
            config.args, self.model_info, devices=devices, platform=self.space.platform
        )
        if problems:
            self._tell_skipped(study, trial, str(TrialStatus.INVALID_CONFIG), "; ".join(problems))
            if trial.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE:
                raise StudyError(
                    "the baseline config breaks a known constraint: "
                    + "; ".join(problems)
                    + " (fix the fixed options or the space's baseline values)"
                )
            return True
        baseline = trial.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE
        twin = None if baseline else _measured_twin(study, trial)  # a failed baseline reruns
        if twin is not None:
            self._tell_skipped(
                study, trial, TrialStatus.DUPLICATE, f"same config as trial {twin.number}"
            )
            return True
        if baseline or not self.learn_failures:
            return False  # the baseline always runs: a wrong prediction must not stop the study
        reason = self._predicted_oom(trial.params, config, _known_ooms(study))
        if reason is not None:
            self._tell_skipped(study, trial, str(TrialStatus.PREDICTED_OOM), reason)
            return True
        problem = self._memory_problem(config)
        if problem is not None:
            self._tell_skipped(study, trial, str(TrialStatus.PREDICTED_OOM), problem)
            return True
        return False

    def _predicted_oom(
        self,
        params: dict[str, Any],
        config: EngineConfig,
        ooms: list[tuple[int, dict[str, Any]]],
    ) -> str | None:
        """Why `params` would run out of memory as a known OOM config did, if it would.

        By the memory order of the parameters (at least as much on every one), or, where the
        KV size is given, by what the two configs surely allocate (the estimate's weights + KV
        + activations): one OOM then rules out every config that allocates more, whichever
        parameter makes up the difference.
        """
        number = dominating_oom(self.space, params, ooms)
        if number is not None:
            return f"needs at least the memory of trial {number}, which ran out of memory"
        need = self._allocated(config)
        if need is None:
            return None
        for number, oom_params in ooms:
            if not comparable(self.space, params, oom_params):
                continue
            known = self._allocated(self._engine_config(oom_params))
            if known is not None and need >= known:
                return (
                    f"allocates at least the memory of trial {number}, which ran out of memory "
                    f"({need / 2**30:.2f} >= {known / 2**30:.2f} GiB by the estimate)"
                )
        return None

    def _allocated(self, config: EngineConfig) -> int | None:
        return allocated_bytes(
            config.args, self.model_info, _local_model(config), self.space.platform
        )

    def _memory_problem(self, config: EngineConfig) -> str | None:
        """Why the config cannot fit the device's memory, by the pre-launch estimate."""
        memory = self.device_memory()
        if memory is None or self.model_info is None:
            return None
        if self.lanes > 1 and memory.platform == "cpu":
            # Trials side by side on one host share its memory.
            share = memory.total_bytes // self.lanes
            memory = DeviceMemory(memory.device, share, min(memory.available_bytes, share))
        # The device the memory was read from says which of vLLM's checks apply (a space for
        # platform "any" runs on whatever the host has).
        estimate = estimate_memory(
            config.args,
            self.model_info,
            _local_model(config),
            memory.platform,
            memory.total_bytes,
            memory.available_bytes,
        )
        if estimate is None or estimate.problem is None:
            return None
        return f"estimate: {estimate.problem}"

    def _tell_skipped(self, study: optuna.Study, trial: Trial, status: str, reason: str) -> None:
        trial.set_user_attr(keys.STATUS, status)
        trial.set_user_attr(keys.REASON, reason)
        for name, value in constraint_values(None, self.spec.slos, 0.0, status).items():
            trial.set_constraint(name, value)
        study.tell(trial, objective_values(self.spec.objectives, None))
        self.emit(TrialSkipped(trial.number, status, reason))

    def _record(self, study: optuna.Study, trial: Trial, m: Measurement, trial_dir: Path) -> None:
        trial.set_user_attr(keys.STATUS, m.status)
        trial.set_user_attr(keys.REASON, m.reason)
        trial.set_user_attr(keys.ENGINE, m.engine)
        trial.set_user_attr(keys.DEVICE_S, m.device_s)
        trial.set_user_attr(keys.TRIAL_DIR, str(trial_dir))
        if m.summary is not None:
            trial.set_user_attr(keys.METRICS, _flat_metrics(m))
        if m.spread:
            trial.set_user_attr(keys.SPREAD, m.spread)
        if m.log_tail:
            trial.set_user_attr(keys.LOG_TAIL, m.log_tail[-4000:])
        if m.summary is None and not self.learn_failures:
            study.tell(trial, state=TrialState.FAIL)  # the naive way: samplers ignore it
            return
        constraints = constraint_values(
            m.summary, self.spec.slos, self.spec.max_error_rate, m.status
        )
        for name, value in constraints.items():
            trial.set_constraint(name, value)
        study.tell(trial, objective_values(self.spec.objectives, m.summary))


def trial_engine_config(
    spec: TuneSpec,
    space: SearchSpace,
    params: dict[str, Any],
    extra_env: dict[str, str] | None = None,
    cores: str | None = None,
) -> EngineConfig:
    """The engine config of a point of the space: the space's options and variables, the
    spec's fixed ones over them, then `extra_env` (a lease's devices); `{cores}` is `cores`
    (default: the spec's, else every usable core)."""
    options, env = space.to_engine(params)
    options.update(spec.engine.options)
    env.update(spec.engine.env)
    env.update(extra_env or {})
    return EngineConfig(
        model=_model_ref(spec.model),
        served_model_name=spec.api_model_name,
        args=options,
        env=resolve_env(env, cores or spec.engine.cores),
    )


def _jsonable(value: dict[str, Any]) -> dict[str, Any]:
    """The value as it reads back from the storage (JSON types only)."""
    result: dict[str, Any] = json.loads(json.dumps(value, default=str))
    return result


def _flat_metrics(m: Measurement) -> dict[str, float]:
    assert m.summary is not None
    unset = {
        name
        for name in ("capacity_rps", "peak_memory_gib")
        if getattr(m.summary, name) is None  # not searched, not measured
    }
    out = {name: m.summary.metric(name) for name in METRIC_NAMES if name not in unset}
    out["completed"] = float(m.summary.completed)
    out["duration_s"] = m.summary.duration_s
    return {k: (v if v == v and abs(v) != float("inf") else -1.0) for k, v in out.items()}


def _local_records(trial: TrialRecord) -> list[RequestRecord]:
    """A measured trial's request records, where its folder is on this machine (else none)."""
    if not trial.trial_dir:
        return []
    try:
        return read_records(Path(trial.trial_dir) / layout.REQUESTS)
    except (OSError, ValueError):
        return []


def _local_model(config: EngineConfig) -> Path | None:
    """The model's folder, where it is a local one (the estimate reads its checkpoint)."""
    path = Path(config.model)
    return path if path.is_dir() else None


def _known_ooms(study: optuna.Study) -> list[tuple[int, dict[str, Any]]]:
    """(number, params) of the trials that ran out of memory on the device."""
    return [
        (t.number, t.params)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get(keys.STATUS) == TrialStatus.OOM
    ]


def _measured_twin(study: optuna.Study, trial: Trial) -> optuna.trial.FrozenTrial | None:
    """A trial of the same config that was measured, or that holds a slot and runs now."""
    states = (TrialState.COMPLETE, TrialState.RUNNING)
    for other in study.get_trials(deepcopy=False, states=states):
        if other.number == trial.number or other.params != trial.params:
            continue
        key = keys.DEVICE_S if other.state == TrialState.COMPLETE else keys.SLOT
        if other.user_attrs.get(key) is not None:
            return other
    return None


def _model_ref(model: str) -> str:
    """A local model path made absolute (engines run in other folders); hub names as given."""
    path = Path(model)
    return str(path.resolve()) if path.exists() else model
