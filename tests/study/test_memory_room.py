"""Other jobs' memory on the study's device (issue 45): the estimate judges a config against the
room the device has had for this study, not what other jobs leave free at the moment.

A trial whose config fits that room but not what is free now waits; a wait that runs out is
`environment`, and an engine that ran out of memory while other processes held part of the
room is `environment` too: never the config's OOM, never learned as its region.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from autotune.devices import DeviceMemory
from autotune.engine import EngineConfig
from autotune.measure import Measurement
from autotune.space import SearchSpace, load_space
from autotune.spec import TuneSpec
from autotune.store import StudyStore
from autotune.study import Harness, Machine, SkipRule, StudyResult, StudyRunner, Verdict
from autotune.study._gate import DeviceRoom
from autotune.study._room import Rooms
from autotune.vocab.status import OOM_STATUSES, TrialStatus
from study.fakes import KV_SPACE, FakeMeasure, MakeSpec, Script, launched, records

GIB = 2**30
MIB = 2**20
TOTAL = 8 * GIB
IDLE_FREE = 6 * GIB  # what the node has free with no other job on it


def kv_space(tmp_path: Path) -> tuple[SearchSpace, str]:
    file = tmp_path / "kv.yaml"
    file.write_text(KV_SPACE)
    return load_space(file), str(file)


class Node:
    """NUMA node 0 of a host shared with other jobs: read `n` (from 1) finds `free(n)` bytes."""

    def __init__(self, free: dict[range, int]) -> None:
        self.free = free
        self.reads = 0
        self.lock = threading.Lock()

    def __call__(self, ids: list[int] | None) -> DeviceMemory:
        with self.lock:
            self.reads += 1
            n = self.reads
        free = next((b for r, b in self.free.items() if n in r), IDLE_FREE)
        return DeviceMemory("cpu:node0", TOTAL, free)


def tune(
    spec: TuneSpec, space: SearchSpace, measure: FakeMeasure, node: Node, **kw: float
) -> StudyResult:
    harness = Harness(spec, space, measure, machine=Machine(device_memory=node, **kw))  # type: ignore[arg-type]
    return StudyRunner(harness, StudyStore(spec.storage_url)).run()


def test_other_jobs_memory_makes_trials_wait_not_predicted_oom(
    make_spec: MakeSpec,
    measure: FakeMeasure,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The issue's reproduction: the baseline runs on an idle node; then other jobs' engines
    leave 128 MiB free for the next 60 reads. Before, every proposal (the baseline's own KV
    size among them) was `predicted_oom` against that moment's free memory, and the study ended
    'exhausted' after 40 skips; now the trial waits for the memory and every trial runs."""
    space, file = kv_space(tmp_path)
    spec = make_spec(trials=4, space=file, seed=3)
    node = Node({range(2, 62): 128 * MIB})  # read 1: the baseline's

    with caplog.at_level(logging.INFO, logger="autotune.study._room"):
        result = tune(spec, space, measure, node, memory_wait_s=30.0, memory_poll_s=0.001)

    trials = records(spec)
    assert not [t for t in trials if t.status in OOM_STATUSES]
    assert not result.exhausted
    assert len(launched(trials)) == 4 and all(t.status == "ok" for t in trials)
    assert trials[1].params["kv_cache_mib"] * MIB > 128 * MIB  # it did not fit the moment
    waits = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(waits) == 1  # one line for the one wait
    assert waits[0].getMessage().startswith("trial 1 waits up to 30 s: other processes hold")
    assert "memory came free" in caplog.text


def test_a_wait_that_runs_out_is_the_hosts_fault_and_queued_again(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    """Other jobs keep the node after the baseline: each proposal waits its bound and is
    recorded `environment` (FAILED: no sampler learns its region; no OOM constraint), its
    config queued again once; the study says what kept it from launching."""
    space, file = kv_space(tmp_path)
    spec = make_spec(trials=2, space=file, seed=3)
    node = Node({range(2, 10**9): 128 * MIB})

    result = tune(spec, space, measure, node, memory_wait_s=0.01, memory_poll_s=0.001)

    trials = records(spec)
    assert trials[0].status == "ok" and len(launched(trials)) == 1
    busy = trials[1:]
    assert busy and all(t.status == TrialStatus.ENVIRONMENT for t in busy)
    assert all(t.state == "fail" and t.device_s is None for t in busy)
    assert busy[0].reason.startswith("not launched: other processes hold memory: cpu:node0 has")
    assert "waited 0 s for it" in busy[0].reason
    assert busy[1].params == busy[0].params  # queued again, once
    assert busy[2].params != busy[0].params
    assert result.skips == {SkipRule.BUSY: result.skipped}
    assert result.predicted == 0


def oom_above(measure: FakeMeasure, mib: int, reason: str = "") -> Script:
    """Engines with more than `mib` of KV run out of memory; `reason` (with `{}` for the KV
    cache's bytes) is what the engine says, by default vLLM's check of the node's memory."""

    def script(i: int, config: EngineConfig) -> Measurement:
        kv = config.args["kv_cache_memory_bytes"]
        if kv > mib * MIB:
            said = reason.format(kv) if reason else "Available memory on node 0"
            return Measurement(status="oom", reason=said, device_s=1.0)
        return measure.ok(config)

    return script


# torch's CPU allocator under an address-space limit
# (tests/fixtures/engine_logs/cpu-alloc-failure.log)
LIMIT = "DefaultCPUAllocator: can't allocate memory: you tried to allocate {} bytes. Error code 12"


@pytest.mark.parametrize(
    ("held", "reason", "status"),
    [
        (0, "", TrialStatus.OOM),
        (3 * GIB, "", TrialStatus.ENVIRONMENT),
        (3 * GIB, LIMIT, TrialStatus.OOM),
    ],
    ids=[
        "the device had its room: the config's OOM",
        "others held 3 GiB: the host's",
        "others held 3 GiB, the engine's own limit failed an allocation that fit: the config's",
    ],
)
def test_an_oom_while_other_processes_held_memory_is_not_the_configs(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path, held: int, reason: str, status: str
) -> None:
    """An engine runs out of memory (above 1 GiB of KV here). On a node with all the room the
    study has had, that is the config's `oom`, and larger KV sizes are predicted from it; with
    3 GiB of it held by other processes at launch, it is `environment`, predicts nothing, and
    no repair is queued; unless the engine says the allocation that failed (its KV cache) was
    smaller than the 3 GiB still free: then a limit of the engine's own failed it, and the
    config's `oom` is learned, others' memory or not."""
    space, file = kv_space(tmp_path)
    spec = make_spec(trials=6, space=file, seed=3, repair=True)
    measure.script = oom_above(measure, 1024, reason)
    node = Node({range(2, 10**9): IDLE_FREE - held})

    tune(spec, space, measure, node, memory_wait_s=0.0)

    trials = records(spec)
    failed = [t for t in launched(trials) if t.status != "ok"]
    assert failed and {t.status for t in failed} == {status}
    if status == TrialStatus.ENVIRONMENT:
        assert failed[0].reason.startswith("out of memory, the host's fault: other processes held")
        assert not [t for t in trials if t.status == "predicted_oom" or t.role == "repair"]
        assert all(t.constraints["oom"] == 0.0 for t in failed)
    else:
        assert [t for t in trials if t.role == "repair"]


SMALL_SPACE = """\
name: small
platform: cpu
fixed: {enforce_eager: true}
parameters:
  - {name: max_num_seqs, type: categorical, choices: [16, 32], baseline: 32}
  - {name: kv_cache_mib, type: int, option: kv_cache_memory_bytes, scale: 1048576,
     low: 256, high: 512, step: 256, baseline: 256}
  - {name: block_size, type: categorical, choices: [64, 128], baseline: 128}
"""


def test_an_oom_of_a_config_no_larger_than_one_that_ran_is_the_hosts(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    """The baseline (256 MiB of KV, 32 sequences) ran; a later engine with no more memory on
    any knob (block_size has no memory order) runs out of memory: the host's fault, whatever
    the node read, and the baseline's own setting stays open to the search."""
    (tmp_path / "small.yaml").write_text(SMALL_SPACE)
    space = load_space(tmp_path / "small.yaml")
    spec = make_spec(trials=4, space=str(tmp_path / "small.yaml"), seed=1)

    def script(i: int, config: EngineConfig) -> Measurement:
        if i > 0 and config.args["kv_cache_memory_bytes"] <= 256 * MIB:
            return Measurement(status="oom", reason="out of memory", device_s=1.0)
        return measure.ok(config)

    measure.script = script
    StudyRunner(Harness(spec, space, measure), StudyStore(spec.storage_url)).run()

    trials = records(spec)
    small = [t for t in launched(trials)[1:] if t.params["kv_cache_mib"] == 256]
    assert small, "seed 1 proposes the baseline's KV size again"
    for t in small:
        assert t.status == TrialStatus.ENVIRONMENT, t
        assert "trial 0, which needs at least its memory, started in this study" in t.reason
    assert not [t for t in trials if t.status in OOM_STATUSES]


def test_rooms_keep_the_most_found_free_per_device() -> None:
    reads = iter([3, 5, 1, 2])

    def read(ids: list[int] | None) -> DeviceMemory:
        device = (ids or [0])[0]
        return DeviceMemory(f"cuda:{device}", 8 * GIB, next(reads) * GIB)

    rooms = Rooms(read, wait_s=0.0, poll_s=0.0, cancel=threading.Event())
    assert rooms.room([0]) == DeviceRoom(DeviceMemory("cuda:0", 8 * GIB, 3 * GIB), 3 * GIB)
    assert rooms.room([0]) == DeviceRoom(DeviceMemory("cuda:0", 8 * GIB, 5 * GIB), 5 * GIB)
    assert rooms.room([0]).most_free == 5 * GIB  # type: ignore[union-attr]
    assert rooms.room([1]).most_free == 2 * GIB  # type: ignore[union-attr]


def test_a_wait_ends_at_once_when_the_study_is_cancelled() -> None:
    cancel = threading.Event()
    cancel.set()
    rooms = Rooms(
        lambda ids: DeviceMemory("cpu:node0", TOTAL, GIB), wait_s=60.0, poll_s=10.0, cancel=cancel
    )
    busy = Verdict(TrialStatus.ENVIRONMENT, "other processes hold memory", SkipRule.BUSY)
    with pytest.raises(KeyboardInterrupt):
        rooms.wait(None, lambda room: busy, trial=3)
