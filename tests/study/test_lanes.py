"""Trials side by side and many workers on one study, with a scripted `measure` (no engines):
exact budgets, disjoint devices, orphaned trials recovered, cancellation."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune.devices import DeviceMemory, DevicePool
from autotune.engine import EngineConfig
from autotune.measure import Measurement
from autotune.space import SearchSpace, load_space
from autotune.store import StudyStore
from autotune.study import Harness, Machine, StudyRunner
from autotune.study._worker import end_run, is_dead_here, new_run, worker_attr
from study.fakes import STUDY, DeviceWatch, FakeMeasure, MakeSpec, launched, records, tp_space

HOST = socket.gethostname()


def test_two_lanes_run_the_exact_budget_on_disjoint_devices(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    space = tp_space(tmp_path)
    spec = make_spec(trials=8, space=str(tmp_path / "tp.yaml"))
    watch = DeviceWatch(measure, together=2)
    pool = DevicePool([0, 1, 2], platform="cuda")
    store = StudyStore(spec.storage_url)
    result = StudyRunner(
        Harness(spec, space, watch, machine=Machine(pool=pool, lanes=2)), store
    ).run()
    trials = records(spec)
    assert len(launched(trials)) == 8 and result.measured == 8
    assert watch.overlaps == [] and watch.most_at_once == 2
    for config, devices in zip(measure.calls, watch.devices, strict=True):
        assert len(devices) == config.args["tensor_parallel_size"]
    slots = sorted(t.slot for t in launched(trials))
    assert slots == list(range(1, 9))
    assert all(t.worker.devices for t in launched(trials))
    assert pool.free == [0, 1, 2]  # every lease given back


def test_tensor_parallel_beyond_the_pool_is_rejected_before_launch(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    space = tp_space(tmp_path)
    spec = make_spec(trials=4, space=str(tmp_path / "tp.yaml"), sampler="random")
    pool = DevicePool([5], platform="cuda")
    StudyRunner(
        Harness(spec, space, measure, machine=Machine(pool=pool)), StudyStore(spec.storage_url)
    ).run()
    assert all(c.args["tensor_parallel_size"] == 1 for c in measure.calls)
    assert all(c.env["CUDA_VISIBLE_DEVICES"] == "5" for c in measure.calls)
    invalid = [t for t in records(spec) if t.status == "invalid_config"]
    assert invalid and all("tensor_parallel_size" in t.reason for t in invalid)


def test_two_runners_share_one_budget_without_duplicates(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    spec = make_spec(trials=6)
    # Each trial holds its device 0.5 s, so that the joining runner (which waits for the
    # baseline, then opens its own sampler) races the first one for slots on a slow host too.
    first = DeviceWatch(measure, hold_s=0.5)
    StudyStore(spec.storage_url)  # created before the two race for it
    runners = [
        StudyRunner(
            Harness(spec, space, first), StudyStore(spec.storage_url), poll_s=0.1, join=join
        )
        for join in (False, True)  # the second joins as `autotune worker` does
    ]
    threads = [threading.Thread(target=r.run) for r in runners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    trials = records(spec)
    assert len(launched(trials)) == 6 and len(measure.calls) == 6
    assert len({t.number for t in launched(trials)}) == 6
    assert len({tuple(sorted(t.params.items())) for t in launched(trials)}) == 6
    # One host: the two runners take turns on its cores (autotune.devices._hostlock), as two
    # tuners on one machine do; runners on two machines would overlap.
    assert first.most_at_once == 1
    assert {t.worker.run for t in launched(trials)} == {r.run_token for r in runners}


def test_a_dead_workers_trial_is_recovered_once_its_heartbeat_is_stale(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure, tmp_path: Path
) -> None:
    spec = make_spec(trials=2)
    store = StudyStore(spec.storage_url)
    study, _ = store.create_or_load(
        STUDY, ["maximize", "minimize", "minimize"], optuna.samplers.RandomSampler()
    )
    left = study.ask(space.distributions())  # a worker on another machine that died
    store.rdb.record_heartbeat(left._trial_id)
    elsewhere = worker_attr("gone", HOST).model_copy(update={"host": "other-machine"})
    left.set_user_attr("worker", elsewhere.stored())
    store.slots(study).claim(left.number, budget=2)

    store.rdb.grace_period = 1
    time.sleep(2.2)
    StudyRunner(Harness(spec, space, measure), store, poll_s=0.1).run()
    trials = records(spec)
    assert trials[left.number].status == "interrupted" and trials[left.number].state == "fail"
    assert len(launched(trials)) == 2
    assert [c for c in measure.calls if c.args["max_num_seqs"] == left.params["max_num_seqs"]]


def test_a_live_workers_trial_is_waited_for_not_taken(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    spec = make_spec(trials=1)
    store = StudyStore(spec.storage_url)
    study, _ = store.create_or_load(
        STUDY, ["maximize", "minimize", "minimize"], optuna.samplers.RandomSampler()
    )
    busy = study.ask(space.distributions())
    token = new_run()
    busy.set_user_attr("worker", worker_attr(token, HOST).stored())
    store.slots(study).claim(busy.number, budget=1)

    def finish_later() -> None:
        time.sleep(1.0)
        busy.set_user_attr("device_s", 1.0)
        busy.set_user_attr("status", "ok")
        study.tell(busy, [1.0, 1.0, 1.0])
        end_run(token)

    finisher = threading.Thread(target=finish_later)
    with store.heartbeat(busy._trial_id):
        finisher.start()
        result = StudyRunner(Harness(spec, space, measure), store, poll_s=0.1).run()
    finisher.join()
    assert result.measured == 0 and measure.calls == []  # the budget was the live trial's
    assert records(spec)[busy.number].state == "complete"


def test_cancel_stops_every_lane_and_records_interrupted(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    space = tp_space(tmp_path)
    spec = make_spec(trials=6, space=str(tmp_path / "tp.yaml"))
    cancel = threading.Event()
    started = threading.Barrier(2)

    def wait_for_cancel(config: EngineConfig, trial_dir: Path) -> Measurement:
        started.wait()
        while not cancel.is_set():
            time.sleep(0.02)
        raise KeyboardInterrupt  # what the launcher and the guard raise once cancelled

    pool = DevicePool([0, 1], platform="cuda")
    harness = Harness(
        spec, space, wait_for_cancel, machine=Machine(pool=pool, lanes=2, cancel=cancel)
    )
    runner = StudyRunner(harness, StudyStore(spec.storage_url))
    threading.Timer(0.5, cancel.set).start()
    result = runner.run()
    trials = records(spec)
    assert result.interrupted
    assert [t.status for t in trials] == ["interrupted", "interrupted"]
    assert store_slots(spec) == {}  # interrupted trials give their slots back
    assert pool.free == [0, 1]


def store_slots(spec: Any) -> dict[int, int]:
    store = StudyStore(spec.storage_url, create=False)
    return store.slots(store.load(spec.study)).held()


def test_worker_identity_tells_a_dead_process_from_a_live_one() -> None:
    token = new_run()
    mine = worker_attr(token, HOST)
    assert not is_dead_here(mine, HOST)
    end_run(token)
    assert is_dead_here(mine, HOST)  # this process, but its run has ended
    elsewhere = mine.model_copy(update={"host": "other-machine"})
    assert not is_dead_here(elsewhere, HOST)  # not ours to judge
    gone = worker_attr("x", HOST).model_copy(update={"pid": _dead_pid()})
    assert is_dead_here(gone, HOST)
    # A live process (init), started long before.
    reused = worker_attr("x", HOST).model_copy(update={"pid": 1})
    assert is_dead_here(reused, HOST)


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(proc.stdout)


Unused = Callable[..., Any]  # keep pytest from flagging the imported fixtures' types
_ = (pytest, TrialState)


ONE_GPU_SPACE = """\
name: one-gpu
platform: cuda
parameters:
  - {name: max_num_seqs, type: int, low: 4, high: 256, log: true, baseline: 64}
"""


def test_the_estimate_reads_each_lanes_own_device_not_device_0(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    """Two lanes on two GPUs: while a trial's engine holds most of its GPU, the other lane's
    trial (on the other GPU) must see that GPU's memory, not device 0's, and launch."""
    (tmp_path / "one.yaml").write_text(ONE_GPU_SPACE)
    space = load_space(tmp_path / "one.yaml")
    spec = make_spec(trials=6, space=str(tmp_path / "one.yaml"))
    watch = DeviceWatch(measure, hold_s=0.3, together=2)
    total = 80 * 2**30

    def memory(ids: list[int] | None) -> DeviceMemory:
        """A GPU with a trial on it has 2 GiB free (its engine took the rest); else all."""
        device = (ids or [0])[0]
        with watch.lock:
            busy = str(device) in watch.busy
        return DeviceMemory(f"cuda:{device}", total, 2 * 2**30 if busy else total)

    asked: list[list[int] | None] = []

    def recorded(ids: list[int] | None) -> DeviceMemory:
        asked.append(ids)
        return memory(ids)

    pool = DevicePool([0, 1], platform="cuda")
    harness = Harness(
        spec, space, watch, machine=Machine(device_memory=recorded, pool=pool, lanes=2)
    )
    StudyRunner(harness, StudyStore(spec.storage_url)).run()
    trials = records(spec)
    assert [t.status for t in trials if t.status == "predicted_oom"] == []
    assert len(launched(trials)) == 6 and watch.most_at_once == 2
    assert asked and all(ids is not None and len(ids) == 1 for ids in asked)  # its lease
    # What the old gate saw: device 0's memory, read before the lease, while lane 0 ran there.
    assert memory(None).available_bytes == total  # nothing runs now


def test_the_baseline_takes_the_last_slot_before_another_lane_can(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget of one trial and two lanes: the baseline (queued, asked first) is the trial
    measured, even when its proposal takes longer to reach its slot than another lane's (here
    its gate is slowed); before, the other lane's sampled config could take the only slot and
    the study ended without its baseline (seen on the real engine, tests/e2e/test_real_parallel)."""
    from autotune.study._trial import TrialRunner

    gate = TrialRunner._gate_verdict

    def slow_for_the_baseline(self: Any, study: Any, trial: Any, *args: Any) -> Any:
        if trial.user_attrs.get("role") == "baseline":
            time.sleep(0.5)
        return gate(self, study, trial, *args)

    monkeypatch.setattr(TrialRunner, "_gate_verdict", slow_for_the_baseline)
    space = tp_space(tmp_path)
    spec = make_spec(trials=1, space=str(tmp_path / "tp.yaml"))
    pool = DevicePool([0, 1, 2], platform="cuda")
    StudyRunner(
        Harness(spec, space, measure, machine=Machine(pool=pool, lanes=2)),
        StudyStore(spec.storage_url),
    ).run()
    (measured,) = launched(records(spec))
    assert measured.role == "baseline" and measured.number == 0, records(spec)
