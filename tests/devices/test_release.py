"""`wait_released` replays recorded tool outputs against a scripted clock."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.devices import (
    NPU_SMI_INFO,
    NVIDIA_APPS_QUERY,
    NVIDIA_GPU_QUERY,
    ReleaseResult,
    memory_before_launch,
    run_tool,
    wait_released,
)

MIB = 1 << 20
ENGINE_A10G = {385, 386, 387, 388}  # the TP=4 workers in the A10G fixtures
ENGINE_A3_NPU01 = {3325989, 3330598, 3328327, 3333165}  # the engine on NPUs 0 and 1 (A3)


class Clock:
    """A monotonic clock that only `sleep` moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Replay:
    """A fake `run`: each argv answers its outputs in order, the last one again and again."""

    def __init__(self, outputs: dict[tuple[str, ...], list[str]]) -> None:
        self.outputs = outputs
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: list[str]) -> str:
        key = tuple(argv)
        self.calls.append(key)
        answers = self.outputs[key]
        return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def cuda_replay(smi_text: Callable[[str], str], *apps: str) -> Replay:
    return Replay(
        {
            NVIDIA_GPU_QUERY: [smi_text("nvidia_query_gpu_a10g_x4.csv")],
            NVIDIA_APPS_QUERY: [smi_text(name) for name in apps],
        }
    )


def test_cuda_waits_until_the_workers_are_gone(
    smi_text: Callable[[str], str], clock: Clock
) -> None:
    run = cuda_replay(
        smi_text,
        "nvidia_compute_apps_a10g_x4.csv",
        "nvidia_compute_apps_a10g_x4.csv",
        "nvidia_compute_apps_empty.csv",
    )
    result = wait_released("cuda", ENGINE_A10G, None, 30.0, run=run, clock=clock, sleep=clock.sleep)
    assert result == ReleaseResult(released=True, waited_s=1.0)
    assert run.calls.count(NVIDIA_GPU_QUERY) == 1
    assert run.calls.count(NVIDIA_APPS_QUERY) == 3


def test_cuda_only_the_given_devices_count(smi_text: Callable[[str], str], clock: Clock) -> None:
    one_left = "\n".join(smi_text("nvidia_compute_apps_a10g_x4.csv").splitlines()[1:2]) + "\n"
    run = cuda_replay(smi_text, "nvidia_compute_apps_a10g_x4.csv")
    run.outputs[NVIDIA_APPS_QUERY].append(one_left)  # pid 386 still on cuda:1
    result = wait_released(
        "cuda", ENGINE_A10G, ["cuda:0", "cuda:2"], 30.0, run=run, clock=clock, sleep=clock.sleep
    )
    assert result.released
    assert result.waited_s == 0.5


def test_cuda_timeout_names_the_holders(smi_text: Callable[[str], str], clock: Clock) -> None:
    run = cuda_replay(smi_text, "nvidia_compute_apps_a10g_x4.csv")
    result = wait_released("cuda", ENGINE_A10G, None, 2.0, run=run, clock=clock, sleep=clock.sleep)
    assert not result.released
    assert result.waited_s == 2.0
    assert [(p.device, p.pid, p.used_bytes) for p in result.holders] == [
        ("cuda:0", 385, 21954 * MIB),
        ("cuda:1", 386, 21956 * MIB),
        ("cuda:2", 387, 21956 * MIB),
        ("cuda:3", 388, 21956 * MIB),
    ]
    assert clock.sleeps == [0.5, 0.5, 0.5, 0.5]


def test_other_processes_do_not_hold_us_up(smi_text: Callable[[str], str], clock: Clock) -> None:
    run = cuda_replay(smi_text, "nvidia_compute_apps_a10g_x4.csv")
    result = wait_released("cuda", {999}, None, 30.0, run=run, clock=clock, sleep=clock.sleep)
    assert result == ReleaseResult(released=True, waited_s=0.0)


def test_ascend_waits_until_the_process_is_gone(
    smi_text: Callable[[str], str], clock: Clock
) -> None:
    run = Replay(
        {
            NPU_SMI_INFO: [
                smi_text("npu_smi_910b3_x8_one_process.txt"),
                smi_text("npu_smi_910b3_x8_one_process.txt"),
                smi_text("npu_smi_910b3_x8_one_process.txt"),
                smi_text("npu_smi_910b3_x8_idle.txt"),
            ]
        }
    )
    result = wait_released(
        "ascend", {1333928}, ["npu:2"], 30.0, run=run, clock=clock, sleep=clock.sleep
    )
    assert result == ReleaseResult(released=True, waited_s=1.5)


def test_ascend_a3_devices_and_timeout(smi_text: Callable[[str], str], clock: Clock) -> None:
    run = Replay({NPU_SMI_INFO: [smi_text("npu_smi_a3_ascend910_x8_processes.txt")]})
    # Named by the runtime's chip ids: NPU 6 and 7, two chips each, are 12-15.
    chips_6_7 = ["npu:12", "npu:13", "npu:14", "npu:15"]
    on_6_7 = wait_released(
        "ascend", ENGINE_A3_NPU01, chips_6_7, 5.0, run=run, clock=clock, sleep=clock.sleep
    )
    assert on_6_7 == ReleaseResult(released=True, waited_s=0.0)
    anywhere = wait_released(
        "ascend", ENGINE_A3_NPU01, None, 1.0, run=run, clock=clock, sleep=clock.sleep
    )
    assert not anywhere.released
    assert len(anywhere.holders) == 7
    assert {p.device for p in anywhere.holders} == {"npu:0", "npu:1", "npu:2", "npu:3"}


def test_ascend_matches_pids_inside_a_container(
    smi_text: Callable[[str], str], clock: Clock
) -> None:
    text = smi_text("npu_smi_910b4_x1_container_column.txt")
    busy = text.replace(
        "| No running processes found in NPU 0                           "
        "                                                   |",
        "| 0       0                 | 485946        | python             "
        "| 5175                  | 131                     |",
    )
    run = Replay({NPU_SMI_INFO: [busy, text]})
    result = wait_released("ascend", {131}, None, 10.0, run=run, clock=clock, sleep=clock.sleep)
    assert result == ReleaseResult(released=True, waited_s=0.5)


def test_cpu_does_not_ask_any_tool(clock: Clock) -> None:
    def run(argv: list[str]) -> str:
        raise AssertionError(f"ran {argv}")

    result = wait_released("cpu", {1, 2}, None, 30.0, run=run, clock=clock, sleep=clock.sleep)
    assert (result.released, result.waited_s) == (True, 0.0)


def test_nothing_to_wait_for(clock: Clock) -> None:
    result = wait_released("cuda", [], None, 30.0, run=Replay({}), clock=clock)
    assert (result.released, result.waited_s) == (True, 0.0)


def test_unknown_platform() -> None:
    with pytest.raises(ValueError, match="tpu"):
        wait_released("tpu", {1}, None, 1.0, run=Replay({}))


@pytest.mark.parametrize("platform", ["cuda", "ascend"])
def test_tool_not_installed(platform: str, clock: Clock) -> None:
    def run(argv: list[str]) -> str:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    result = wait_released(platform, {1}, None, 30.0, run=run, clock=clock, sleep=clock.sleep)
    assert (result.released, result.waited_s) == (True, 0.0)
    assert "not installed" in result.note
    assert clock.sleeps == []


@pytest.mark.parametrize(
    "error",
    [
        subprocess.CalledProcessError(6, ["nvidia-smi"], output="No devices were found\n"),
        subprocess.TimeoutExpired(["nvidia-smi"], 10.0),
        PermissionError(13, "Permission denied"),
    ],
)
def test_tool_error_does_not_raise(
    error: Exception, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    def run(argv: list[str]) -> str:
        raise error

    with caplog.at_level(logging.WARNING, logger="autotune.devices"):
        result = wait_released("cuda", {1}, None, 30.0, run=run, clock=clock, sleep=clock.sleep)
    assert result.released
    assert result.note.startswith("nvidia-smi failed")
    assert "nvidia-smi failed" in caplog.text


def test_unreadable_output_does_not_raise(clock: Clock) -> None:
    run = Replay({NPU_SMI_INFO: ["not a table\n"]})
    result = wait_released("ascend", {1}, None, 30.0, run=run, clock=clock, sleep=clock.sleep)
    assert result.released
    assert "npu-smi failed" in result.note


def test_run_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_tool(["echo", "0, GPU-x"]) == "0, GPU-x\n"
    with pytest.raises(subprocess.CalledProcessError):
        run_tool(["false"])
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi on it
    with pytest.raises(FileNotFoundError):
        run_tool(list(NVIDIA_APPS_QUERY))
    result = wait_released("cuda", {1}, None, 30.0)
    assert (result.released, result.note) == (True, "nvidia-smi not installed")


def test_any_uses_the_tool_that_is_installed(smi_text: Callable[[str], str], clock: Clock) -> None:
    outputs = [smi_text("npu_smi_910b3_x8_one_process.txt"), smi_text("npu_smi_910b3_x8_idle.txt")]

    def run(argv: list[str]) -> str:
        if argv[0] == "nvidia-smi":
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        return outputs.pop(0)

    result = wait_released("any", {1333928}, None, 30.0, run=run, clock=clock, sleep=clock.sleep)
    assert result == ReleaseResult(released=True, waited_s=0.5)


def test_any_without_tools(clock: Clock) -> None:
    def run(argv: list[str]) -> str:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    result = wait_released("any", {1}, None, 30.0, run=run, clock=clock, sleep=clock.sleep)
    assert result == ReleaseResult(True, 0.0, note="nvidia-smi and npu-smi not installed")


def _gpus(used_mib: int) -> str:
    """The A10G x4 query with GPU 0 using `used_mib` (the others idle)."""
    rows = [f"{d}, GPU-{d}, NVIDIA A10G, 23028, {used_mib if d == 0 else 263}, 0" for d in range(4)]
    return "\n".join(rows) + "\n"


def test_a_container_waits_for_the_memory_to_come_back_to_its_level(clock: Clock) -> None:
    """nvidia-smi in a container without the host's pid namespace lists the engine under its
    host pid (90385), never one of ours: the pid wait ends at once, the memory wait does not."""
    gpus = [_gpus(21000), _gpus(21000), _gpus(21000), _gpus(700)]
    run = Replay({
        NVIDIA_GPU_QUERY: [_gpus(263), *gpus],  # the first answer: the level before the launch
        NVIDIA_APPS_QUERY: ["GPU-0, 90385, 20737\n"],
    })  # fmt: skip
    before = memory_before_launch("cuda", {"CUDA_VISIBLE_DEVICES": "0"}, run)
    assert before == {"cuda:0": 263 * MIB}
    result = wait_released(
        "cuda", ENGINE_A10G, None, 10.0, run=run, clock=clock, sleep=clock.sleep, before=before
    )
    # (The pid wait read the GPUs' names once.) 700 MiB is within the slack (512 MiB) of 263:
    # the memory is back at the third poll of the memory wait, 0.5 s apart.
    assert result.released and result.waited_s == pytest.approx(1.0) and not result.holders


def test_memory_that_never_comes_back_is_a_warning_not_an_error(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    run = Replay({NVIDIA_GPU_QUERY: [_gpus(21000)], NVIDIA_APPS_QUERY: [""]})
    result = wait_released(
        "cuda", ENGINE_A10G, None, 2.0, run=run, clock=clock, sleep=clock.sleep,
        before={"cuda:0": 263 * MIB, "cuda:1": 263 * MIB},
    )  # fmt: skip
    assert result.released and result.waited_s == 2.0
    assert "still above the level before: cuda:0 +20.3 GiB" in result.note
    assert "another job took some" in caplog.text
    assert memory_before_launch("cpu", {}) == {}  # no tool is run on CPU
