"""autotune.devices._speed: the fixed work timed on a trial's devices."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from autotune.devices import read_speed
from autotune.devices._speed import MAX_CORES, parse_reading, probe_cores

GOOD = '{"units": {"cpu0": {"small_ops_s": 0.02, "matmul_s": 0.04, "copy_s": 0.01}}}'


def test_a_reading_is_the_rate_of_the_parts_geometric_mean() -> None:
    reading = parse_reading("some import noise\n" + GOOD + "\n")
    assert reading is not None
    assert reading.speed == pytest.approx(1 / (0.02 * 0.04 * 0.01) ** (1 / 3))
    assert reading.to_dict()["units"] == {
        "cpu0": {"small_ops_s": 0.02, "matmul_s": 0.04, "copy_s": 0.01}
    }
    # Half as fast in every part: half the reading.
    slow = parse_reading(
        '{"units": {"x": {"small_ops_s": 0.04, "matmul_s": 0.08, "copy_s": 0.02}}}'
    )
    assert slow is not None and slow.speed == pytest.approx(reading.speed / 2)


def test_cores_count_by_their_mean_devices_by_the_slowest() -> None:
    two = '{"units": {"a": {"copy_s": 0.01}, "b": {"copy_s": 0.02}}}'
    cores = parse_reading(two, combine="mean")
    devices = parse_reading(two, combine="min")
    assert cores is not None and cores.speed == pytest.approx(75.0)  # one core half taken
    assert devices is not None and devices.speed == pytest.approx(50.0)


@pytest.mark.parametrize(
    "stdout",
    ["", "not json", '{"units": {}}', '{"units": {"a": {}}}', '{"units": {"a": {"copy_s": 0}}}',
     '{"x": 1}', "[1]", '{"units": [1]}'],
)  # fmt: skip
def test_what_is_not_a_reading_gives_none(stdout: str, caplog: pytest.LogCaptureFixture) -> None:
    assert parse_reading(stdout) is None
    assert "speed probe" in caplog.text


def test_the_cpu_probe_times_the_engines_cores() -> None:
    assert probe_cores({"VLLM_CPU_OMP_THREADS_BIND": "2-3"}, None) == [2, 3]
    assert probe_cores({"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, "5") == [0, 1]  # a core per rank
    assert probe_cores({"VLLM_CPU_OMP_THREADS_BIND": "auto"}, "4-5") == [4, 5]
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) <= MAX_CORES:
        assert probe_cores({}, None) == allowed
    assert probe_cores({}, "nonsense") == probe_cores({}, None)
    assert probe_cores({}, "0-63") == [0, 8, 16, 24, 32, 40, 48, 56]  # at most 8, spread


def test_a_probe_that_fails_warns_and_reads_nothing(caplog: pytest.LogCaptureFixture) -> None:
    def failing(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "Traceback\nModuleNotFoundError: torch\n")

    def timing_out(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, kw["timeout"])

    assert read_speed("cuda", {"CUDA_VISIBLE_DEVICES": "1"}, run=failing) is None
    assert "speed probe failed (exit 1): ModuleNotFoundError: torch" in caplog.text
    assert read_speed("cpu", {}, run=timing_out) is None
    assert "speed probe did not run" in caplog.text


def test_the_probe_sees_the_devices_of_the_lease() -> None:
    seen: dict[str, Any] = {}

    def fake(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        seen.update(kw, argv=argv)
        return subprocess.CompletedProcess(argv, 0, GOOD, "")

    reading = read_speed("ascend", {"ASCEND_RT_VISIBLE_DEVICES": "4,5"}, run=fake)
    assert reading is not None and reading.speed > 0
    assert seen["env"]["ASCEND_RT_VISIBLE_DEVICES"] == "4,5"
    assert seen["argv"][-2:] == ["ascend", ""]  # every device the lease shows


def test_a_real_cpu_probe_reads_a_host_slowed_by_work_beside_it_as_slower() -> None:
    """The fixed work for real (torch, a process pinned to one core): with a busy loop on
    that core beside it, the reading falls (the two share the core: about half)."""
    core = str(min(os.sched_getaffinity(0)))
    env = {"VLLM_CPU_OMP_THREADS_BIND": core}
    quiet = [read_speed("cpu", env) for _ in range(2)]
    hog = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        preexec_fn=lambda: os.sched_setaffinity(0, {int(core)}),
    )
    try:
        time.sleep(0.3)
        busy = [read_speed("cpu", env) for _ in range(2)]
    finally:
        hog.kill()
        hog.wait()
    assert all(r is not None and r.speed > 0 for r in quiet + busy)
    fast = max(r.speed for r in quiet if r is not None)
    slow = max(r.speed for r in busy if r is not None)
    assert slow < 0.8 * fast, (quiet, busy)
