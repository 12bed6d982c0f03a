"""The tuning loop: run trials until the budget is spent, one lane or several side by side.

Lifecycle of a trial: proposed -> checked (hard constraints, known OOMs, the memory estimate:
an impossible config is never started) -> launched -> measured -> recorded. Failures are
recorded with their kind and the study goes on, except when the baseline fails (the host or the
model is at fault) or an engine survives its teardown (the next trial would run on a busy host).
The parts of that life live in their own modules: opening the study (`_opening`), the gate
(`_gate`), one trial (`_trial`), the recording (`_record`) and the orphans (`_orphans`).

An OOM teaches the search twice: Optuna sees a complete trial with worst-case values and a
positive `oom` constraint, and every later proposal that needs at least the memory of a known
OOM config is recorded as `predicted_oom` without a launch. With `repair`, an OOM trial is
retried once, one step back towards what is known to fit, as a trial linked to it. A value
that is unsupported here (or a crash that repeats) teaches the same way: later proposals that
carry it are `predicted_unsupported` (`_learned.py`). The result counts what each rule saved.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from autotune import store as keys
from autotune.store import StudyFacts, StudyStore
from autotune.study._errors import StudyError
from autotune.study._events import Event
from autotune.study._gate import SkipRule
from autotune.study._harness import Harness
from autotune.study._opening import open_study, retry_failed_baseline
from autotune.study._orphans import settle_orphans
from autotune.study._record import Recorder
from autotune.study._trial import TrialOutcome, TrialRunner
from autotune.study._worker import end_run, new_run
from autotune.vocab.status import TrialStatus

SKIP_LIMIT_FACTOR = 10  # proposals that are skipped (invalid, duplicate) per trial of budget


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
    pruned: int = 0  # stopped early (see autotune.measure._prune); counted apart from failures
    pruned_device_s: float = 0.0
    ok_device_s: list[float] = field(default_factory=list)  # of the fully measured trials
    # Proposals the gate kept from launching, by the rule that did (`SkipRule` values).
    skips: dict[str, int] = field(default_factory=dict)

    @property
    def predicted(self) -> int:
        """Proposals a learned rule (a known OOM, the estimate, an unsupported value or a
        repeated crash) kept from launching: launches that would have failed."""
        learned = (SkipRule.OOM_ORDER, SkipRule.OOM_ESTIMATE, SkipRule.UNSUPPORTED)
        return sum(self.skips.get(rule, 0) for rule in learned)

    @property
    def mean_failed_device_s(self) -> float:
        """What a failed launch of this run cost on average (0 without one)."""
        return self.failed_device_s / self.failed if self.failed else 0.0

    @property
    def saved_device_s(self) -> float:
        """Device seconds early stopping saved, estimated: a pruned trial would have taken
        as long as the median fully measured trial of this run."""
        if not self.pruned or not self.ok_device_s:
            return 0.0
        full = statistics.median(self.ok_device_s)
        return max(0.0, self.pruned * full - self.pruned_device_s)

    def add(self, outcome: TrialOutcome) -> bool:
        """Count one outcome; False where it used none of the skip budget."""
        if outcome.skipped:
            self.skipped += 1
            rule = outcome.verdict.rule if outcome.verdict is not None else None
            if rule is not None:
                self.skips[rule] = self.skips.get(rule, 0) + 1
            return True
        m = outcome.measurement
        if m is None:  # no slot
            return False
        self.trial_numbers.append(outcome.number)
        self.device_s += m.device_s
        if m.status == TrialStatus.PRUNED:
            self.pruned += 1
            self.pruned_device_s += m.device_s
            return False
        self.measured += m.ok
        self.failed += not m.ok
        self.failed_device_s += 0.0 if m.ok else m.device_s
        if m.ok:
            self.ok_device_s.append(m.device_s)
        return False


class StudyRunner:
    """Runs one study to its budget on this machine's `harness`.

    Other workers (other processes, other machines) may run the same study at the same time:
    the budget's slots, heartbeats and the recovery of orphaned trials keep them from running
    more than `trials`, twice the same trial, or leaving a dead worker's trial behind.
    `join`: this runner joins a study others run (`autotune worker`); its sampler is seeded
    apart from theirs. `poll_s`: how often a lane looks again while the last slots are held by
    trials running elsewhere.
    """

    def __init__(
        self,
        harness: Harness,
        store: StudyStore,
        on_event: Callable[[Event], None] = lambda event: None,
        *,
        join: bool = False,
        poll_s: float = 2.0,
    ) -> None:
        self.harness = harness
        self.spec = harness.spec
        self.store = store
        self.emit = on_event
        self.join = join
        self.recorder = Recorder(harness.spec, store, harness.bounds)
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._skips_left = 0
        self.run_token = ""  # this run's, as its trials record it (set by `run`)

    def run(self) -> StudyResult:
        study, created = open_study(self.harness, self.store, self.join)
        slots = self.store.slots(study)
        slots.adopt(_measured_numbers(study))
        self.run_token = token = new_run()
        trials = TrialRunner(self.harness, self.store, slots, self.recorder, token, self.emit)
        try:
            self._settle(study, trials)
            if not created:
                retry_failed_baseline(self.harness, study)
            result = StudyResult(name=self.spec.study)
            self._skips_left = SKIP_LIMIT_FACTOR * self.spec.trials
            try:
                self._bounds_first(study, trials, result)
            except KeyboardInterrupt:
                result.interrupted = True
                return result
            if self.harness.machine.lanes == 1:
                try:
                    self._lane(study, trials, result, 0)
                except KeyboardInterrupt:
                    result.interrupted = True
            else:
                self._run_lanes(study, trials, result)
        finally:
            end_run(token)
        return result

    def _bounds_first(self, study: optuna.Study, trials: TrialRunner, result: StudyResult) -> None:
        """With baseline-relative SLOs, the baseline runs first, alone (here, or on the worker
        that took it), and fixes the bounds before any other trial is launched (`_slos`).
        (Optuna pops the oldest queued trial: a baseline queued again after a failure, behind
        queued warm starts, lets those run first, judged without the pending bounds.)"""
        while not self.harness.bounds.adopt(StudyFacts.of(study)):
            if len(trials.slots.held()) >= self.spec.trials:
                return  # the budget is spent: nothing is left to judge
            states = {
                t.state
                for t in study.get_trials(deepcopy=False)
                if t.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE
            }
            if TrialState.WAITING in states:
                result.add(trials.run_one(study, 0))
            elif TrialState.RUNNING in states:
                self._stop.wait(self.poll_s)
                self._settle(study, trials)
            else:
                pending = ", ".join(self.harness.bounds.pending())
                raise StudyError(
                    f"the study's baseline fixes {pending} (relative SLOs, --min-agreement) but "
                    "none was measured; run it again to retry the baseline"
                )

    def _settle(self, study: optuna.Study, trials: TrialRunner) -> None:
        settle_orphans(study, self.harness, self.store, trials.slots, self.recorder)

    def _run_lanes(self, study: optuna.Study, trials: TrialRunner, result: StudyResult) -> None:
        """Run `lanes` trials at a time, each lane in a thread of its own.

        A lane's engine is started and torn down by that thread (the engine's parent-death
        signal follows the thread that started it). Ctrl-C or SIGTERM in the main thread
        cancels every lane: each tears its engine down and records its trial as interrupted.
        An error in one lane lets the others finish their trial, then ends the study with it.
        """
        errors: list[BaseException] = []

        def lane(k: int) -> None:
            try:
                self._lane(study, trials, result, k)
            except KeyboardInterrupt:  # cancelled
                with self._lock:
                    result.interrupted = True
            except BaseException as exc:
                with self._lock:
                    errors.append(exc)
                self._stop.set()

        threads = [
            threading.Thread(target=lane, args=(k,), name=f"lane-{k}")
            for k in range(self.harness.machine.lanes)
        ]
        try:
            # Lanes claim their first slots in turn: the first asks first, so a queued
            # baseline holds a slot before another lane's proposal can take the budget's last
            # one (with --trials 1 the study ran without its baseline).
            for k, thread in enumerate(threads):
                if k:
                    self._first_claim(threads[k - 1], trials.claimed[k - 1])
                thread.start()
            while any(thread.is_alive() for thread in threads):
                for thread in threads:
                    thread.join(timeout=0.2)
        except KeyboardInterrupt:
            result.interrupted = True
            self._stop.set()
            self.harness.machine.cancel.set()
            for thread in threads:
                if thread.ident is not None:  # started
                    thread.join()
        if errors:
            raise errors[0]

    def _first_claim(self, lane: threading.Thread, claimed: threading.Event) -> None:
        """Wait until `lane`'s first proposal holds its slot (or ended without one), the lane
        ended, or the study stops."""
        while lane.is_alive() and not self._stop.is_set() and not claimed.wait(0.05):
            pass

    def _lane(
        self, study: optuna.Study, trials: TrialRunner, result: StudyResult, lane: int
    ) -> None:
        """Run trials until every slot of the budget is held by a finished trial.

        While the last slots are held by trials running elsewhere, the lane waits: if their
        worker dies, their slots come free and this lane runs them.
        """
        while not self._stop.is_set():
            self._settle(study, trials)
            held = trials.slots.held()
            if len(held) >= self.spec.trials:
                if not _any_running(study, set(held.values())):
                    return
                self._stop.wait(self.poll_s)
                continue
            with self._lock:
                if self._skips_left <= 0:
                    result.exhausted = True
                    return
            outcome = trials.run_one(study, lane)
            with self._lock:
                self._skips_left -= result.add(outcome)


def _any_running(study: optuna.Study, numbers: set[int]) -> bool:
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return any(t.number in numbers for t in running)


def _measured_numbers(study: optuna.Study) -> list[int]:
    """Trials that count against the budget: launched ones, whatever their outcome."""
    finished = (TrialState.COMPLETE, TrialState.FAIL)
    return [
        t.number
        for t in study.get_trials(deepcopy=False, states=finished)
        if t.user_attrs.get(keys.DEVICE_S) is not None
    ]
