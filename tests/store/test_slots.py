"""Trial slots and heartbeats, on every backend: what keeps many workers to one budget."""

from __future__ import annotations

import threading
import time

import optuna
from optuna.trial import TrialState

from autotune.store import StudyStore

DIRECTIONS = ["maximize"]


def _study(store: StudyStore) -> optuna.Study:
    study, _ = store.create_or_load("s", DIRECTIONS, optuna.samplers.RandomSampler(seed=0))
    return study


def test_slots_are_handed_out_up_to_the_budget_and_come_back(store: StudyStore) -> None:
    slots = store.slots(_study(store))
    assert [slots.claim(n, budget=3) for n in (10, 11, 12, 13)] == [1, 2, 3, None]
    assert slots.claim(11, budget=3) == 2  # a holder keeps its slot
    slots.release(11)
    assert slots.claim(13, budget=3) == 2
    assert slots.held() == {1: 10, 2: 13, 3: 12}
    assert slots.claim(14, budget=4) == 4  # a larger budget (a resumed study) adds slots


def test_concurrent_claims_never_exceed_the_budget(store: StudyStore) -> None:
    study = _study(store)
    budget, workers = 5, 12
    won: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(workers)

    errors: list[BaseException] = []

    def claim(number: int) -> None:
        try:
            start.wait(timeout=30)
            slots = StudyStore(store.url).slots(study)  # each worker its own connections
            slot = slots.claim(number, budget)
        except BaseException as exc:
            with lock:
                errors.append(exc)
            return
        if slot is not None:
            with lock:
                won.append(slot)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(won) == [1, 2, 3, 4, 5]
    assert len(store.slots(study).held()) == budget


def test_adopt_gives_slots_to_trials_measured_before_slots_existed(store: StudyStore) -> None:
    slots = store.slots(_study(store))
    slots.adopt([7, 3])
    assert slots.held() == {1: 3, 2: 7}
    slots.adopt([1, 2, 3])  # a study with slots keeps them
    assert slots.held() == {1: 3, 2: 7}


def test_a_trial_whose_heartbeat_stopped_is_stale(store: StudyStore) -> None:
    study = _study(store)
    store.rdb.grace_period = 1  # seconds; the default is six missed beats
    store.heartbeat_s = 0.3
    alive, dead = study.ask(), study.ask()
    with store.heartbeat(dead._trial_id):
        pass
    with store.heartbeat(alive._trial_id):
        time.sleep(2.5)
        assert store.stale_trial_ids(study) == {dead._trial_id}
        # `show` and the dashboard read the dead tuner's trial as interrupted, not running.
        shown = {t.number: t.status for t in store.trials(study.study_name)}
        assert shown == {alive.number: "running", dead.number: "interrupted"}
    never = study.ask()  # no heartbeat at all: not judged by heartbeat
    assert never._trial_id not in store.stale_trial_ids(study)
    assert study.get_trials(states=(TrialState.RUNNING,))
