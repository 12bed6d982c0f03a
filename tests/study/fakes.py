"""The study tests' stand-ins: a scripted `measure` (no processes), a runner over it, and the
spaces several test modules share. A helper module: test modules import from here, never from
each other."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.bench import LoadProfile, RequestRecord, Summary, summarize, write_records
from autotune.engine import EngineConfig
from autotune.measure import Measurement
from autotune.predict import SchedulerConfig, replay
from autotune.predict._fit import LinearTimer
from autotune.predict._model import workload
from autotune.space import SearchSpace, load_space
from autotune.spec import TuneSpec
from autotune.store import StudyStore, TrialFacts, TrialRecord
from autotune.study import Event, Harness, StudyResult, StudyRunner
from autotune.vocab.status import TrialStatus

STUDY = "s"

# A measurement by (call index, config); the default measures every config successfully.
Script = Callable[[int, EngineConfig], Measurement]
MakeSpec = Callable[..., TuneSpec]


class Killed(BaseException):
    """Stands in for the tuner process being killed: nothing in the runner catches it."""


@dataclass
class FakeMeasure:
    summary_of: Callable[..., Summary]
    script: Script | None = None
    calls: list[EngineConfig] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)

    def __call__(self, config: EngineConfig, trial_dir: Path) -> Measurement:
        self.calls.append(config)
        self.dirs.append(trial_dir)
        if self.script is not None:
            return self.script(len(self.calls) - 1, config)
        return self.ok(config)

    def ok(self, config: EngineConfig) -> Measurement:
        seqs = int(config.args.get("max_num_seqs", 128))
        summary = self.summary_of(throughput=10.0 * seqs, ttft_p99=20.0 + seqs, tpot_p99=3.0)
        return Measurement(
            status="ok", summary=summary, engine=TrialFacts(startup_s=1.0), device_s=2.0
        )


def run(
    spec: TuneSpec,
    space: SearchSpace,
    measure: FakeMeasure,
    events: list[Event] | None = None,
) -> tuple[StudyResult, list[TrialRecord]]:
    store = StudyStore(spec.storage_url)
    on_event = events.append if events is not None else (lambda event: None)
    result = StudyRunner(Harness(spec, space, measure), store, on_event).run()
    return result, store.trials(spec.study)


def gone_worker() -> dict[str, Any]:
    """The worker record of a tuner in this process that has ended."""
    from autotune.study._worker import end_run, new_run, worker_attr

    token = new_run()
    end_run(token)
    return worker_attr(token, socket.gethostname()).stored()


def records(spec: TuneSpec) -> list[TrialRecord]:
    return StudyStore(spec.storage_url, create=False).trials(spec.study)


def launched(trials: list[TrialRecord]) -> list[TrialRecord]:
    return [t for t in trials if t.device_s is not None]


KV_SPACE = """\
name: kv
platform: cpu
fixed: {enforce_eager: true}
parameters:
  - {name: max_num_seqs, type: categorical, choices: [16, 32, 64], baseline: 32}
  - {name: kv_cache_mib, type: int, option: kv_cache_memory_bytes, scale: 1048576,
     low: 256, high: 4096, step: 256, baseline: 256}
  - {name: block_size, type: categorical, choices: [64, 128], baseline: 128}
"""


TP_SPACE = """\
name: tp
platform: cuda
parameters:
  - {name: max_num_seqs, type: int, low: 4, high: 256, log: true, baseline: 64}
  - {name: tensor_parallel_size, type: categorical, choices: [1, 2], baseline: 1}
"""


class DeviceWatch:
    """A measure that takes `hold_s` and checks that no device is used by two trials at once.
    With `together` > 1, a trial also waits (up to `TOGETHER_S`) until that many have run at
    once: lanes that can overlap are seen to, however slow the host between trials."""

    TOGETHER_S = 30.0

    def __init__(self, inner: FakeMeasure, hold_s: float = 0.3, together: int = 1) -> None:
        self.inner = inner
        self.hold_s = hold_s
        self.together = together
        self.lock = threading.Condition()
        self.busy: set[str] = set()
        self.overlaps: list[str] = []
        self.most_at_once = 0
        self.running = 0
        self.devices: list[list[str]] = []

    def __call__(self, config: EngineConfig, trial_dir: Path) -> Measurement:
        mine = config.env.get("CUDA_VISIBLE_DEVICES", "").split(",")
        with self.lock:
            self.overlaps += [d for d in mine if d in self.busy]
            self.busy |= set(mine)
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self.devices.append(mine)
            self.lock.notify_all()
            self.lock.wait_for(lambda: self.most_at_once >= self.together, self.TOGETHER_S)
        time.sleep(self.hold_s)
        with self.lock:
            self.busy -= set(mine)
            self.running -= 1
            return self.inner(config, trial_dir)


def tp_space(tmp_path: Path) -> SearchSpace:
    file = tmp_path / "tp.yaml"
    file.write_text(TP_SPACE)
    return load_space(file)


# `ModelEngine`'s engine: 3 ms a step, 40 us a batched token, 20 us a sequence, 8 ms per request.
TRUE = LinearTimer((2e-3, 1e-3, 4e-5, 2e-5, 2e-9, 0.0, 0.0, 8e-3))
LENGTHS = tuple(
    (random.Random(k).randint(100, 300), random.Random(-k - 1).randint(16, 64)) for k in range(80)
)
MODEL_ENGINE_LOAD = {"concurrency": 48}
BYTES_PER_TOKEN = 4096


@dataclass
class ModelEngine:
    """A `measure` whose engine runs the scheduler at the TRUE step time: the records and KV
    capacity a real trial leaves, and when each trial started."""

    slos: dict[str, float]
    started: list[float] = field(default_factory=list)

    def __call__(self, config: EngineConfig, trial_dir: Path) -> Measurement:
        self.started.append(time.time())
        args = config.args
        kv = int(args["kv_cache_memory_bytes"]) // BYTES_PER_TOKEN
        cfg = SchedulerConfig(int(args["max_num_seqs"]), int(args["max_num_batched_tokens"]),
                              kv // 16, 16, True)  # fmt: skip
        sent = [RequestRecord(i, 0.0, None, (), 0.0, p, o) for i, (p, o) in enumerate(LENGTHS)]
        records = replay(cfg, TRUE, workload(sent, LoadProfile(**MODEL_ENGINE_LOAD))).records()
        trial_dir.mkdir(parents=True, exist_ok=True)
        write_records(trial_dir / "requests.jsonl", records)
        summary = summarize(records, self.slos)
        facts = TrialFacts(kv_cache_tokens=kv)
        return Measurement(TrialStatus.OK, summary=summary, engine=facts, device_s=1.0)
