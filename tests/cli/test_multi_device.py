"""`autotune tune --parallel auto`, `confirm`, `profile` and `export` on a simulated multi-device
host (tests/sim_devices.py): an 8 x 910B3 Ascend host with two NPUs held by another job, and a
4-GPU CUDA host with one GPU held. The device tool (npu-smi first on PATH; NVML on the GPU
host) is a stand-in whose memory follows the fake engines; each engine takes its devices' memory
as vLLM does, and fails with vLLM's error where that memory is not free, so a lease on a held
device, or a re-lease before the last engine's memory came back, shows up as a failed trial.
"""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import sim_nvml
from sim_devices import Host, engines, install
from typer.testing import CliRunner, Result

from autotune.cli import app
from autotune.devices import _pool, format_device_list
from autotune.store import StudyStore, default_storage_url
from autotune.vocab import layout
from autotune.vocab.status import FAILURE_KINDS, TrialStatus

TESTS = Path(__file__).resolve().parents[1]
ENGINE_COMMAND = f"{{python}} {TESTS / 'fake_engine.py'}"
WORKLOAD = "random:input=32,output=8,prompts=8,warmup=1"
PROFILING_ENGINE = f"{{python}} {TESTS / 'fixtures' / 'profile' / 'fake_profiling_engine.py'}"
TRACE = TESTS / "fixtures" / "profile" / "trace.pt.trace.json.gz"
SPACE = """
name: sim-{platform}
platform: {platform}
parameters:
  - name: tensor_parallel_size
    type: categorical
    choices: [1, 2, 4]
    baseline: 1
  - name: max_num_seqs
    type: int
    low: 4
    high: 64
    log: true
    baseline: 16
  - name: gpu_memory_utilization
    type: float
    low: 0.80
    high: 0.95
    step: 0.01
    baseline: 0.92
  - name: queue
    type: categorical
    env: TASK_QUEUE_ENABLE
    choices: ["0", "1", "2"]
    baseline: "1"
"""


@dataclass(frozen=True)
class Case:
    host: Host
    variable: str  # what shows a trial its devices
    groups: list[set[int]]  # devices near each other in the recorded topology (CPU affinity)
    idle_free_share: float  # free memory of an idle device over its total

    @property
    def busy(self) -> set[int]:
        return set(self.host.busy)


CASES = {
    # npu_smi_topo_910b3_x8.txt: every pair HCCS, NPU pairs 0-1 / 2-3 / 4-5 / 6-7 share CPUs.
    "ascend-910b3-x8": Case(
        Host.ascend_910b3({0: 59000, 5: 62000}),
        "ASCEND_RT_VISIBLE_DEVICES",
        [{0, 1}, {2, 3}, {4, 5}, {6, 7}],
        (65536 - 3408) / 65536,
    ),
    # nvidia_smi_topo_sim_x4.txt: GPUs 0-1 and 2-3 behind one PCIe bridge each, SYS across.
    "cuda-a10g-x4": Case(
        Host.cuda_a10g({3: 20000}), "CUDA_VISIBLE_DEVICES", [{0, 1}, {2, 3}], (23028 - 263) / 23028
    ),
}


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def spans(devices: set[int] | tuple[int, ...], groups: list[set[int]]) -> int:
    return sum(1 for g in groups if g & set(devices))


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> Case:
    return CASES[request.param]


@pytest.fixture
def sim(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The simulated host, its tool first on PATH; returns its state folder. GPUs are read
    through NVML, as on a real host (nvidia-ml-py: the stand-in tests/sim_nvml.py), with no
    nvidia-smi to fall back on: every read of them must go through NVML."""
    state = tmp_path / "sim"
    bin_dir = install(state, case.host)
    if case.host.platform == "cuda":
        monkeypatch.setitem(sys.modules, "pynvml", sim_nvml)
    else:
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SIM_DEVICES", str(state))
    monkeypatch.setenv("FAKE_PROFILE_TRACE", str(TRACE))
    return state


def test_parallel_study_confirm_profile_and_export_on_a_multi_device_host(
    case: Case,
    sim: Path,
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    chosen: list[tuple[list[int], list[int]]] = []  # (free, leased) at each lease, in the pool
    nearest = _pool.nearest_set

    def spy(free: list[int], n: int, cost: object) -> list[int]:
        ids = nearest(free, n, cost)  # type: ignore[arg-type]
        chosen.append((list(free), list(ids)))
        return ids

    monkeypatch.setattr(_pool, "nearest_set", spy)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(platform=case.host.platform))
    root = tmp_path / "studies"
    result = invoke(
        "tune", "--study", "s", "--model", tiny_model, "--engine-command", ENGINE_COMMAND,
        "--space", space, "--workload", WORKLOAD, "--rate", "100", "--root", root,
        "--parallel", "auto", "--trials", "8", "--sampler", "random", "--seed", "3",
        "--confirm", "2", "--confirm-rounds", "2",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for device in case.busy:
        assert f"leaving {case.host.platform} {device} out of the study" in caplog.text
    free = sorted(set(range(case.host.count)) - case.busy)
    assert f"{len(free)} at a time on {format_device_list(free)};" in result.output

    trials = StudyStore(default_storage_url(root, "s"), create=False).trials("s")
    launched = [t for t in trials if t.device_s is not None]
    assert len(launched) == 8
    # No engine failed: none ran on a held device or on one not yet released. The estimate
    # judged each trial by its own devices: only a utilization above what an idle device has
    # free is predicted out of memory (reading a held device, every config was).
    assert not [t for t in launched if t.status in FAILURE_KINDS], result.output
    for t in trials:
        if t.status == TrialStatus.PREDICTED_OOM:
            assert t.params["gpu_memory_utilization"] > case.idle_free_share, t
    for t in launched:
        leased = [int(i) for i in t.lease_env[case.variable].split(",")]
        assert len(leased) == t.params["tensor_parallel_size"]
        assert not set(leased) & case.busy

    ran = _engines_after_profile(case, sim, root)
    # The confirm step re-runs the baseline and up to 2 front configs (how many the front has
    # depends on the measured values) in each of 2 rounds: a trial folder per run.
    confirmed = list((root / "s" / layout.CONFIRM_DIR).glob("*/round-*/trial-*"))
    assert len(confirmed) in (2 * 2, 2 * 3), confirmed
    assert len(ran) >= len(launched) + len(confirmed) + 1  # trials, confirm runs, 1 profile
    for engine in ran:  # trials, confirm runs and the profile all ran on a lease
        assert engine["visible"] is not None, engine
        assert len(engine["devices"]) == engine["tp"], engine
        assert not set(engine["devices"]) & case.busy, engine
    # Disjoint: no device held by two engines at once; the next engine on a device started
    # only once the last one's memory was released (the release delay is 1.5 s).
    reused = 0
    for device in range(case.host.count):
        on = sorted((e for e in ran if device in e["devices"]), key=lambda e: e["alloc_t"])
        for before, after in itertools.pairwise(on):
            assert after["alloc_t"] >= before["free_t"], (device, before, after)
            reused += 1
    assert reused > 0
    # Topology-near: each lease spans as few affinity groups as any set the pool had free.
    assert len(chosen) >= len(ran)
    for free, ids in chosen:
        fewest = min(spans(c, case.groups) for c in itertools.combinations(free, len(ids)))
        assert spans(set(ids), case.groups) == fewest, (free, ids)

    # The exported env file carries what the space tuned, never the lease.
    out = tmp_path / "best.yaml"
    result = invoke("export", "s", "--root", root, "--output", out)
    assert result.exit_code == 0, result.output
    assert "VISIBLE_DEVICES" not in out.read_text()
    exported_env = out.with_suffix(".env").read_text().split()
    assert [line.split("=")[0] for line in exported_env] == ["TASK_QUEUE_ENABLE"]


def _engines_after_profile(case: Case, sim: Path, root: Path) -> list[dict]:
    """Profile the winner; every engine the sim saw, in start order."""
    result = invoke("profile", "s", "--root", root, "--engine-command", PROFILING_ENGINE)
    assert result.exit_code == 0, result.output
    ran = sorted(engines(sim), key=lambda e: e["alloc_t"])
    assert ran[-1]["visible"] is not None and not set(ran[-1]["devices"]) & case.busy
    return ran


@pytest.mark.parametrize(
    ("gpu", "mib", "defaults"),
    [("NVIDIA H100 80GB HBM3", 81559, (1024, 8192)), ("NVIDIA A100-SXM4-80GB", 81920, (256, 2048))],
)
def test_the_baseline_is_what_vllm_picks_on_the_hosts_gpu(
    gpu: str,
    mib: int,
    defaults: tuple[int, int],
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 2-GPU stand-in host of H100s (A100s): the shipped cuda space's baseline takes vLLM's
    API-server defaults for that GPU, 1024 / 8192 (256 / 2048: vLLM keeps A100s small, PR
    #17885), not a fixed 256 / 8192 that no `vllm serve` runs; the YAML header says so."""
    state = tmp_path / "sim"
    host = Host("cuda", 2, mib, 500, name=gpu, compute_cap="9.0" if "H100" in gpu else "8.0")
    monkeypatch.setenv("PATH", f"{install(state, host)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SIM_DEVICES", str(state))
    root = tmp_path / "studies"
    result = invoke(
        "tune", "--study", "d", "--model", tiny_model, "--engine-command", ENGINE_COMMAND,
        "--space", "cuda", "--workload", WORKLOAD, "--rate", "100", "--root", root,
        "--trials", "1", "--option", "max_model_len=512",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (base,) = StudyStore(default_storage_url(root, "d"), create=False).trials("d")
    assert base.role == "baseline" and base.status == TrialStatus.OK, base.reason
    assert (base.params["max_num_seqs"], base.params["max_num_batched_tokens"]) == defaults
    assert base.config["max-num-seqs"] == defaults[0]
    out = tmp_path / "best.yaml"
    assert invoke("export", "d", "--root", root, "-o", out).exit_code == 0
    seqs, tokens = defaults
    line = (
        f"# vLLM's batch defaults here: baseline max_num_seqs={seqs}, "
        f"max_num_batched_tokens={tokens}: "
    )
    header = out.read_text()
    assert line in header and f"defaults for {gpu}, 80 GiB, an API server" in header, header


def test_in_a_container_the_next_trial_waits_for_the_memory_not_the_pids(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tuner in a container without the host's pid namespace: nvidia-smi lists host pids,
    which never match the engine's, and the driver keeps a torn-down engine's memory 2 s.
    Teardown then waits for the device's memory to come back to its level before the launch;
    before, the pid wait ended at once and the next trial met vLLM's free-memory error."""
    state = tmp_path / "sim"
    host = Host.cuda_a10g({}, release_delay_s=2.0)
    host.count, host.pid_offset = 1, 100_000
    monkeypatch.setenv("PATH", f"{install(state, host)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SIM_DEVICES", str(state))
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(platform="cuda"))
    root = tmp_path / "studies"
    result = invoke(
        "tune", "--study", "c", "--model", tiny_model, "--engine-command", ENGINE_COMMAND,
        "--space", space, "--workload", WORKLOAD, "--rate", "100", "--root", root,
        "--trials", "2", "--sampler", "random", "--seed", "1", "--option", "max_model_len=512",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    trials = StudyStore(default_storage_url(root, "c"), create=False).trials("c")
    launched = [t for t in trials if t.device_s is not None]
    assert len(launched) == 2 and all(t.status == TrialStatus.OK for t in launched), [
        (t.status, t.reason) for t in launched
    ]
    runs = sorted(engines(state), key=lambda e: e["alloc_t"])
    for earlier, later in itertools.pairwise(runs):
        assert later["alloc_t"] >= earlier["free_t"], (earlier, later)
