"""Fault injection on one trial: a misbehaving fake engine run as a real process tree.

Each test checks what a user relies on: the failure is named and noticed at once, the whole
tree is gone afterwards, its shared memory is removed and its port is free again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from support import FAKE_COMMAND, fake_settings, processes_mentioning

from autotune.bench import LoadProfile, RequestSpec
from autotune.engine import (
    EngineConfig,
    port_is_free,
)
from autotune.engine._supervise import LEADER, reap_stale_engine, write_pid_file
from autotune.measure import Measurement, Workplan, measure
from autotune.vocab.layout import ENGINE_PID as PID_FILE
from autotune.vocab.status import TrialStatus

CONFIG = EngineConfig(model="tiny", served_model_name="tiny-served", args={"max_num_seqs": 4})
settings = fake_settings


REQUESTS = [RequestSpec([1, 2, 3, 4], 32) for _ in range(40)]
PLAN = Workplan([], REQUESTS, LoadProfile(concurrency=8), {}, hang_s=1.0, deadline_s=60.0)


def shm_names(log: str) -> list[str]:
    return re.findall(r"shared memory (\S+)", log)


def run_trial(tmp_path: Path, **env: str) -> tuple[Measurement, Path]:
    trial = tmp_path / "trial"
    extra = {"FAKE_ENGINE_STARTUP_S": "0.1", "FAKE_ENGINE_STEP_S": "0.01", **env}
    result = measure(CONFIG, trial, PLAN, settings(tmp_path, extra_env=extra))
    return result, trial


def assert_cleared(trial: Path, port_hint: str) -> None:
    assert processes_mentioning(str(trial)) == []
    for name in shm_names((trial / "engine.log").read_text()):
        assert not Path("/dev/shm", name).exists(), f"leaked shared memory {name}"
    assert not (trial / PID_FILE).exists()
    port = int(re.search(r"--port (\d+)", port_hint).group(1))  # type: ignore[union-attr]
    assert port_is_free(port)


def test_engine_killed_mid_benchmark_is_noticed_within_two_seconds(tmp_path: Path) -> None:
    result, trial = run_trial(tmp_path, FAKE_ENGINE_DIE_AFTER="150", FAKE_ENGINE_CHILD="1")
    log = (trial / "engine.log").read_text()

    assert result.status == TrialStatus.CRASH
    assert "SIGKILL" in result.reason
    died_at = float(re.search(r"SIGKILL at ([\d.]+)", log).group(1))  # type: ignore[union-attr]
    noticed = result.engine.abort
    assert noticed is not None and noticed.kind == "engine" and noticed.noticed_unix is not None
    assert 0 <= noticed.noticed_unix - died_at < 2.0
    # Unfinished requests are recorded as errors; the trial folder keeps what was measured.
    lines = (trial / "requests.jsonl").read_text().splitlines()
    assert len(lines) == len(REQUESTS)
    errors = [json.loads(line)["error"] for line in lines]
    assert None in errors and any(errors)  # some finished before the death, the rest failed
    # The engine's child held shared memory; SIGKILL left it behind, teardown removed it.
    assert shm_names(log), "the fake engine core maps a segment"
    assert_cleared(trial, log.splitlines()[0])
    assert json.loads((trial / "measurement.json").read_text())["status"] == "crash"


def test_engine_that_hangs_mid_stream_is_a_hang(tmp_path: Path) -> None:
    started = time.monotonic()
    result, trial = run_trial(tmp_path, FAKE_ENGINE_HANG_AFTER="100", FAKE_ENGINE_CHILD="1")
    assert result.status == TrialStatus.HANG
    assert "no token streamed for" in result.reason
    assert time.monotonic() - started < 150  # hang_s is 1 s: not the 300 s request timeout
    assert_cleared(trial, (trial / "engine.log").read_text().splitlines()[0])


def test_oom_above_a_kv_size_is_classified_from_vllms_own_message(tmp_path: Path) -> None:
    config = EngineConfig(model="tiny", args={"kv_cache_memory_bytes": 2**31})
    result = measure(
        config,
        tmp_path / "trial",
        PLAN,
        settings(tmp_path, extra_env={"FAKE_ENGINE_OOM_ABOVE": str(2**30)}),
    )
    assert result.status == TrialStatus.OOM
    assert "Available memory on node 0" in result.reason
    assert result.summary is None and result.device_s < 10


TUNER = """\
import sys, time
from collections.abc import Callable
from pathlib import Path
from autotune.engine import EngineConfig, LaunchSettings, launch
tmp = Path(sys.argv[1])
env = {"FAKE_ENGINE_STARTUP_S": "0.1", "FAKE_ENGINE_CHILD": "1"}
s = LaunchSettings(command=sys.argv[2], cache_dir=tmp / "cache", extra_env=env,
                   startup_timeout_s=300)
try:
    with launch(EngineConfig(model="tiny"), s, tmp / "trial") as engine:
        time.sleep(120)
except Exception:
    time.sleep(120)
"""


def kill_tuner_and_wait(tmp_path: Path, command: str, ready: Callable[[], bool]) -> float:
    """Start a tuner process that launches `command`, SIGKILL it once `ready()`, and return
    how long the engine's processes took to go."""
    script = tmp_path / "tuner.py"
    script.write_text(TUNER)
    tuner = subprocess.Popen([sys.executable, str(script), str(tmp_path), command])
    deadline = time.monotonic() + 120  # bounds a hang: a busy host starts slowly
    while not ready():
        assert time.monotonic() < deadline, "the engine never got going"
        time.sleep(0.05)
    pgid = json.loads((tmp_path / "trial" / PID_FILE).read_text())["pgid"]
    tree = [psutil.Process(pgid), *psutil.Process(pgid).children(recursive=True)]
    tuner.kill()
    tuner.wait()
    killed = time.monotonic()
    _, alive = psutil.wait_procs(tree, timeout=120)
    assert alive == []
    assert processes_mentioning(str(tmp_path / "trial")) == []
    return time.monotonic() - killed


def test_engine_stops_when_the_tuner_is_killed(tmp_path: Path) -> None:
    """The parent-death signal: a SIGKILLed tuner leaves no engine holding memory."""
    log = tmp_path / "trial" / "engine.log"
    took = kill_tuner_and_wait(
        tmp_path, FAKE_COMMAND, lambda: log.exists() and "Starting vLLM server" in log.read_text()
    )
    assert took < 10  # on its SIGTERM: before the leader's 10 s grace would end in SIGKILL


def test_an_engine_stuck_in_start_up_stops_when_the_tuner_is_killed(tmp_path: Path) -> None:
    """vLLM can hang on SIGTERM while it starts: the group leader escalates to SIGKILL."""
    script = tmp_path / "stuck.sh"
    script.write_text("trap '' TERM\necho starting\nsleep 300 &\nwait\n")
    log = tmp_path / "trial" / "engine.log"
    took = kill_tuner_and_wait(
        tmp_path, f"bash {script}", lambda: log.exists() and "starting" in log.read_text()
    )
    assert took < 60  # the leader's 10 s grace, then SIGKILL: not the server's 300 s sleep


def test_reap_ends_an_engine_left_by_a_killed_tuner(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    trial.mkdir()
    config = trial / "engine.yaml"
    config.write_text("max_num_seqs: 4\n")
    log = open(trial / "engine.log", "w")  # noqa: SIM115 - the engine writes it
    fake = str(Path(__file__).resolve().parents[1] / "fake_engine.py")
    env = {**os.environ, "FAKE_ENGINE_STARTUP_S": "0", "FAKE_ENGINE_CHILD": "1"}
    orphan = subprocess.Popen(
        [sys.executable, fake, "--config", str(config), "--port", "0"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    write_pid_file(trial / PID_FILE, orphan.pid)
    deadline = time.monotonic() + 60
    while not shm_names((trial / "engine.log").read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    names = shm_names((trial / "engine.log").read_text())
    os.kill(orphan.pid, signal.SIGSTOP)  # it ignores SIGTERM: reap must escalate

    assert reap_stale_engine(trial, stop_timeout_s=1.0)
    orphan.wait(timeout=60)
    log.close()
    assert processes_mentioning(str(trial)) == []
    assert names and not any(Path("/dev/shm", n).exists() for n in names)
    assert not (trial / PID_FILE).exists()
    assert not reap_stale_engine(trial)  # nothing left to do


def test_reap_never_signals_a_reused_pid(tmp_path: Path) -> None:
    (tmp_path / PID_FILE).write_text(json.dumps({"pgid": os.getpid(), "create_time": 1.0}))
    assert not reap_stale_engine(tmp_path)  # this test's own pid, started at another time
    assert not (tmp_path / PID_FILE).exists()


@pytest.mark.parametrize(
    ("command", "code"), [("exit 3", 3), ("kill -9 $$", -9), ("kill -11 $$", -11)]
)
def test_group_leader_exits_as_the_server_did(command: str, code: int) -> None:
    """The launcher classifies a death from the exit status: the leader must pass it on."""
    leader = subprocess.Popen(
        [sys.executable, str(LEADER), str(os.getpid()), "bash", "-c", command],
        start_new_session=True,  # as the launcher starts it: its group is its own
        stderr=subprocess.PIPE,
        text=True,
    )
    assert leader.wait(timeout=60) == code
    assert leader.stderr is not None and "Traceback" not in leader.stderr.read()


def test_a_tuner_killed_while_the_leader_starts_the_server_leaves_nothing(tmp_path: Path) -> None:
    """CI once caught a worker SIGKILLed the instant its engine was launched: the leader got
    SIGHUP while it was still starting the server, died by default, and the server lived on.
    SIGHUP is sent across the leader's whole start-up (before, during and after the server's
    spawn); no server may outlive its leader."""

    def leader(tag: str) -> subprocess.Popen[bytes]:
        server = ["bash", "-c", f"exec -a {tag} sleep 60"]
        return subprocess.Popen(
            [sys.executable, str(LEADER), str(os.getpid()), *server], start_new_session=True
        )

    started = time.monotonic()  # how long this host takes until the server exists
    first = leader(f"{tmp_path}-calibrate")
    while not psutil.Process(first.pid).children():  # the server's fork
        time.sleep(0.0005)
    spawn_s = time.monotonic() - started
    os.kill(first.pid, signal.SIGHUP)
    first.wait(timeout=120)
    survivors = []
    for i in range(40):
        tag = f"{tmp_path}-{i}"
        process = leader(tag)
        time.sleep(spawn_s * (0.6 + 0.02 * i))  # 0.6x to 1.4x the time to the server's spawn
        os.kill(process.pid, signal.SIGHUP)
        process.wait(timeout=120)  # bounds a hang: on SIGHUP mid-spawn the leader may wait
        # out its 10 s grace (a SIGTERM the server's fork took before its exec is lost)
        deadline = time.monotonic() + 30  # the group's SIGKILL lands; a server left lives 60 s
        while (left := processes_mentioning(tag)) and time.monotonic() < deadline:
            time.sleep(0.05)
        survivors += left
    for p in survivors:
        p.kill()
    assert survivors == []


def test_a_leader_takes_sighup_by_default_though_its_tuner_runs_under_nohup() -> None:
    # A tuner under `nohup` ignores SIGHUP, and its children inherit that until they set a
    # handler: a SIGHUP to the leader in that moment was lost. The launcher's pre-exec step
    # sets it back to the default (and asks for it on the tuner's death).
    script = (
        "import signal, subprocess, sys\n"
        "from autotune.engine._supervise import _stop_with_parent\n"
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
        "show = 'import signal; print(signal.getsignal(signal.SIGHUP).name)'\n"
        "child = [sys.executable, '-c', show]\n"
        "print(subprocess.run(child, capture_output=True, text=True).stdout.strip())\n"
        "print(subprocess.run(child, capture_output=True, text=True,\n"
        "                     preexec_fn=_stop_with_parent).stdout.strip())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.stdout.split() == ["SIG_IGN", "SIG_DFL"], out.stderr


def test_the_leader_starts_nothing_for_a_tuner_already_gone() -> None:
    leader = subprocess.run(
        [sys.executable, str(LEADER), "1", "bash", "-c", "echo started"],  # pid 1: not its parent
        start_new_session=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert leader.returncode == 1 and "started" not in leader.stdout


def test_engine_that_exits_cleanly_mid_benchmark_is_a_crash_not_a_measurement(
    tmp_path: Path,
) -> None:
    # vLLM's API server exits with status 0 when its engine core is gone; it drops the open
    # streams first and takes a while to exit, so the run can end (every request failed at
    # once) while its process still lives.
    result, trial = run_trial(tmp_path, FAKE_ENGINE_EXIT_AFTER="150", FAKE_ENGINE_EXIT_DELAY_S="3")
    assert result.status == TrialStatus.CRASH, result.reason
    assert result.summary is None
    assert "status 0" in result.reason or "stopped serving" in result.reason
    stored = json.loads((trial / "measurement.json").read_text())
    assert stored["status"] == "crash"
    # What it measured before the end is kept on disk, the failed requests with their error.
    errors = [json.loads(line)["error"] for line in (trial / "requests.jsonl").open()]
    assert None in errors and any(errors)
    assert_cleared(trial, (trial / "engine.log").read_text().splitlines()[0])


def test_failed_requests_above_the_bound_fail_the_trial_with_their_reason(
    tmp_path: Path,
) -> None:
    # Every 4th request answered 500 by a live engine: a quarter of the requests failed.
    result, _ = run_trial(tmp_path, FAKE_ENGINE_FAIL_EVERY="4")
    assert result.status == TrialStatus.BENCHMARK_ERROR
    assert result.summary is None
    assert result.reason.startswith(f"{len(REQUESTS) // 4} of {len(REQUESTS)} requests failed")
    assert "max_error_rate of 0" in result.reason
    # Within a bound that allows them, the same run is a measurement (its errors counted).
    plan = dataclasses.replace(PLAN, max_error_rate=0.3)
    extra = {
        "FAKE_ENGINE_STARTUP_S": "0.1",
        "FAKE_ENGINE_STEP_S": "0.01",
        "FAKE_ENGINE_FAIL_EVERY": "4",
    }
    within = measure(CONFIG, tmp_path / "within", plan, settings(tmp_path, extra_env=extra))
    assert within.status == TrialStatus.OK and within.summary is not None
    assert within.summary.errors == len(REQUESTS) // 4
