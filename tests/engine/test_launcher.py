"""The launcher against tests/fake_engine.py and small scripts, run as real process groups."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest
from support import FAKE_ENGINE, fake_settings

from autotune.engine import (
    EngineConfig,
    EngineError,
    LaunchSettings,
    build_command,
    default_cores,
    group_members,
    launch,
    port_is_free,
    resolve_env,
    terminate_group,
    to_yaml_text,
)
from autotune.engine._launcher import cpu_ranges, engine_env, engine_tmpdir
from autotune.vocab.platform import Platform
from autotune.vocab.status import TrialStatus

pytestmark = pytest.mark.usefixtures("no_leftovers")

CONFIG = EngineConfig(model="tiny", served_model_name="tiny-served", args={"max_num_seqs": 4})
settings = fake_settings


def is_dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_launch_ready_and_torn_down(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    with launch(CONFIG, settings(tmp_path), trial) as engine:
        pgid = engine.process.pid
        assert engine.alive()
        assert engine.url == f"http://127.0.0.1:{engine.port}"
        assert httpx.get(f"{engine.url}/health", timeout=30).status_code == 200
        models = httpx.get(f"{engine.url}/v1/models", timeout=30).json()
        assert [m["id"] for m in models["data"]] == ["tiny-served"]
        assert not port_is_free(engine.port)
        assert group_members(pgid)
        assert (trial / "engine.yaml").read_text() == to_yaml_text(CONFIG)
        assert engine.log_path == trial / "engine.log"
        log = engine.log_path.read_text()
        assert f"Starting vLLM server on http://127.0.0.1:{engine.port}" in log
        assert str(FAKE_ENGINE) in log.splitlines()[0]  # the command line comes first
        assert engine.facts.kv_cache_tokens == 65536
        assert engine.facts.max_concurrency == 64.0
        assert engine.facts.vllm_version == "0.0-fake"  # asked of /version
        assert 0 < engine.startup_s < 20
        assert not (trial / "engine.env").exists()
    assert engine.process.poll() is not None
    assert not engine.alive()
    assert group_members(pgid) == []
    assert port_is_free(engine.port)


def test_config_env_is_written_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    config = CONFIG.model_copy(update={"env": {"VLLM_CPU_OMP_THREADS_BIND": "{cores}"}})
    trial = tmp_path / "trial"
    with launch(config, settings(tmp_path, cores="0-1|2-3"), trial) as engine:
        env = psutil.Process(engine.process.pid).environ()
        assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1|2-3"
        assert env["VLLM_CACHE_ROOT"] == str((tmp_path / "cache" / "vllm").resolve())
    assert (trial / "engine.env").read_text() == "VLLM_CPU_OMP_THREADS_BIND='0-1|2-3'\n"


def test_exception_in_body_tears_down(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="benchmark blew up"),
        launch(CONFIG, settings(tmp_path), tmp_path / "trial") as engine,
    ):
        pgid, port = engine.process.pid, engine.port
        raise RuntimeError("benchmark blew up")
    assert engine.process.poll() is not None
    assert group_members(pgid) == []
    assert port_is_free(port)


def stubborn_script(tmp_path: Path) -> tuple[Path, Path]:
    """A bash engine that ignores SIGTERM, with a child that does too."""
    child_pid_file = tmp_path / "child.pid"
    script = tmp_path / "stubborn.sh"
    script.write_text(
        "trap '' TERM\n"  # ignored signals stay ignored in children: `sleep` ignores it too
        "sleep 300 &\n"
        f"echo $! > {shlex.quote(str(child_pid_file))}\n"
        "wait\n"
    )
    return script, child_pid_file


def test_sigterm_ignored_means_sigkill_for_the_whole_group(tmp_path: Path) -> None:
    script, child_pid_file = stubborn_script(tmp_path)
    process = subprocess.Popen(["bash", str(script)], start_new_session=True)
    while not child_pid_file.exists() or not child_pid_file.read_text().strip():
        time.sleep(0.05)
    started = time.monotonic()
    terminate_group(process, stop_timeout_s=1.0)
    assert 1.0 <= time.monotonic() - started < 30.0  # the stop timeout, then SIGKILL
    assert is_dead(process.pid) and is_dead(int(child_pid_file.read_text()))


def test_an_engine_that_failed_is_killed_without_waiting(tmp_path: Path) -> None:
    """A start-up timeout (or a death, or a hang) skips SIGTERM: a failing vLLM can hang on it."""
    script, child_pid_file = stubborn_script(tmp_path)
    stubborn = settings(
        tmp_path,
        command=f"bash {shlex.quote(str(script))}",
        startup_timeout_s=1.0,
        stop_timeout_s=30.0,
    )
    started = time.monotonic()
    with pytest.raises(EngineError) as info, launch(CONFIG, stubborn, tmp_path / "trial"):
        pytest.fail("an engine that serves nothing must not be yielded")
    elapsed = time.monotonic() - started
    assert info.value.failure.kind is TrialStatus.STARTUP_TIMEOUT
    assert 1.0 <= elapsed < 30.0  # the start-up deadline, not the 30 s stop timeout
    assert is_dead(int(child_pid_file.read_text()))


def test_port_in_use_is_retried_on_another_port(tmp_path: Path) -> None:
    marker = tmp_path / "tried-once"
    script = tmp_path / "flaky.sh"
    script.write_text(
        f"if [ ! -e {shlex.quote(str(marker))} ]; then\n"
        f"  touch {shlex.quote(str(marker))}\n"
        '  echo "OSError: [Errno 98] Address already in use" >&2\n'
        "  exit 1\n"
        "fi\n"
        f'exec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_ENGINE))} "$@"\n'
    )
    trial = tmp_path / "trial"
    flaky = settings(tmp_path, command=f"bash {shlex.quote(str(script))}")
    with launch(CONFIG, flaky, trial) as engine:
        assert httpx.get(f"{engine.url}/health", timeout=5).status_code == 200
        assert engine.log_path == trial / "engine.1.log"
        assert "Starting vLLM server" in engine.log_path.read_text()
    assert "Address already in use" in (trial / "engine.log").read_text()
    assert not (trial / "engine.2.log").exists()


def test_port_in_use_gives_up_after_the_retries(tmp_path: Path) -> None:
    script = tmp_path / "taken.sh"
    script.write_text('echo "OSError: [Errno 98] Address already in use" >&2\nexit 1\n')
    taken = settings(tmp_path, command=f"bash {shlex.quote(str(script))}", port_retries=2)
    trial = tmp_path / "trial"
    with pytest.raises(EngineError) as info, launch(CONFIG, taken, trial):
        pytest.fail("no engine started")
    assert info.value.failure.kind is TrialStatus.PORT_IN_USE
    assert sorted(p.name for p in trial.glob("engine*.log")) == ["engine.1.log", "engine.log"]


def test_build_command_appends_config_host_and_port() -> None:
    argv = build_command(LaunchSettings(command="{python} -m vllm.x"), Path("/t/e.yaml"), 8123)
    assert argv == [
        sys.executable,
        *["-m", "vllm.x", "--config", "/t/e.yaml", "--host", "127.0.0.1", "--port", "8123"],
    ]


def test_build_command_fills_placeholders_only() -> None:
    command = "vllm serve --config={config} --port {port} --host {host} --uvicorn-log-level debug"
    argv = build_command(LaunchSettings(command=command, host="0.0.0.0"), Path("/t/e.yaml"), 9)
    assert argv == [
        *["vllm", "serve", "--config=/t/e.yaml", "--port", "9", "--host", "0.0.0.0"],
        *["--uvicorn-log-level", "debug"],
    ]


def test_build_command_with_one_placeholder_appends_nothing() -> None:
    argv = build_command(LaunchSettings(command="serve --port {port}"), Path("/t/e.yaml"), 9)
    assert argv == ["serve", "--port", "9"]


def test_build_command_quotes_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/opt/my python/bin/python3")
    argv = build_command(LaunchSettings(command="{python} -m x"), Path("/t/e.yaml"), 1)
    assert argv[:3] == ["/opt/my python/bin/python3", "-m", "x"]


def test_resolve_env_replaces_cores() -> None:
    env = {"VLLM_CPU_OMP_THREADS_BIND": "{cores}", "OMP": "x{cores}y", "PLAIN": "1"}
    assert resolve_env(env, "0-3") == {
        "VLLM_CPU_OMP_THREADS_BIND": "0-3",
        "OMP": "x0-3y",
        "PLAIN": "1",
    }
    assert resolve_env(env, None)["VLLM_CPU_OMP_THREADS_BIND"] == default_cores()


def expand(ranges: str) -> set[int]:
    cpus: set[int] = set()
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def test_default_cores_are_this_process_affinity() -> None:
    cores = default_cores()
    assert re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", cores)
    assert expand(cores) == os.sched_getaffinity(0)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ([0, 1, 2, 5, 7, 8], "0-2,5,7-8"),
        ([3], "3"),
        ([0, 1], "0-1"),
        ([0, 2, 4], "0,2,4"),
        ([4, 5, 6, 7, 32, 33], "4-7,32-33"),
    ],
)
def test_ranges(cpus: list[int], text: str) -> None:
    assert cpu_ranges(cpus) == text


def test_engine_env_for_a_local_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("AUTOTUNE_TEST_HOST_VAR", "host")
    cache = tmp_path / "cache"
    config = EngineConfig(model=str(tmp_path), env={"TMPDIR": "/from/config", "A": "{cores}"})
    s = LaunchSettings(cache_dir=cache, cores="2-3", extra_env={"TMPDIR": "/x", "B": "extra"})
    env = engine_env(config, s)
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["VLLM_CACHE_ROOT"] == str(cache.resolve() / "vllm")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(cache.resolve() / "inductor")
    assert engine_tmpdir(cache).is_dir()  # created for the engine (cache/tmp, or a short one)
    assert env["TMPDIR"] == "/from/config"  # the config's env wins
    assert env["A"] == "2-3"
    assert env["B"] == "extra"
    assert env["AUTOTUNE_TEST_HOST_VAR"] == "host"


def test_a_cache_the_user_set_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Their warm compile cache and inspected model classes: a trial starts as their server."""
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "mine"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    cache = tmp_path / "cache"
    env = engine_env(EngineConfig(model=str(tmp_path)), LaunchSettings(cache_dir=cache))
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "mine")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(cache.resolve() / "inductor")
    assert env["TMPDIR"] == str(engine_tmpdir(cache))  # sockets stay in the study's folder


def test_a_cpu_engine_compiles_with_the_cache_that_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-cpu 0.32 fails to load its AOT-compiled model and compiles again at every start
    (_launcher._CPU_AOT): a CPU engine takes vLLM's older compile cache; a GPU or NPU engine
    keeps vLLM's default, and a value the user set is theirs."""
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    config = EngineConfig(model=str(tmp_path))
    assert engine_env(config, LaunchSettings(platform=Platform.CPU))["VLLM_USE_AOT_COMPILE"] == "0"
    for platform in (Platform.CUDA, Platform.ASCEND):
        assert "VLLM_USE_AOT_COMPILE" not in engine_env(config, LaunchSettings(platform=platform))
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    assert engine_env(config, LaunchSettings(platform=Platform.CPU))["VLLM_USE_AOT_COMPILE"] == "1"


def test_engine_env_for_a_hub_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    config = EngineConfig(model="org/not-a-local-path-xyz")
    env = engine_env(config, LaunchSettings())
    assert "HF_HUB_OFFLINE" not in env
    assert "VLLM_CACHE_ROOT" not in env  # no cache_dir: vLLM's own default
    assert env["VLLM_NO_USAGE_STATS"] == "1"


def test_engine_tmpdir_leaves_room_for_vllms_socket_names(tmp_path: Path) -> None:
    """vLLM's ZeroMQ sockets live in TMPDIR; a socket path may not exceed 107 bytes."""
    short = engine_tmpdir(Path("/tmp/c"))
    assert short == Path("/tmp/c/tmp") and short.is_dir()
    deep = tmp_path / ("a-very-long-study-folder-name" * 3) / ".cache"
    tmp = engine_tmpdir(deep)
    assert tmp.is_dir() and len(str(tmp)) + 1 + 36 <= 107
    assert engine_tmpdir(deep) == tmp  # the same cache, the same folder


def test_engine_tmpdir_is_short_even_when_tmpdir_is_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_tmp = tmp_path / ("t" * 80)
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    tmp = engine_tmpdir(tmp_path / ("c" * 80) / ".cache")
    assert tmp.is_dir() and len(str(tmp)) + 1 + 36 <= 107
