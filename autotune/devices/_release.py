"""Waiting, after a trial engine is torn down, until its processes hold no device memory.

A CUDA or NPU worker can hold its device memory for a while after its process group was
signalled (the driver tears the context down); a trial launched in that window sees less free
memory and may fail for a reason that is not its own. `wait_released` polls the device tool
until none of the engine's pids is listed on the devices, or the timeout passes.

It never raises for the tool: on CPU, where the tool is not installed, or where it fails, it
answers "released" at once (with a note), since there is nothing more it can find out.

Limitation: nvidia-smi inside a container that does not share the host's pid namespace lists
host pids, which never match the engine's pids; the wait then ends at once.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from autotune.devices._ascend import NPU_SMI_INFO, parse_npu_smi_info
from autotune.devices._nvidia import (
    NVIDIA_APPS_QUERY,
    NVIDIA_GPU_QUERY,
    gpu_devices,
    parse_nvidia_apps,
    parse_nvidia_gpus,
)
from autotune.devices._records import DeviceProcess, SmiParseError

logger = logging.getLogger(__name__)

Runner = Callable[[list[str]], str]
TOOL_TIMEOUT_S = 10.0
_TOOLS = {"cuda": "nvidia-smi", "ascend": "npu-smi"}
_CANDIDATES = {"cuda": ("cuda",), "ascend": ("ascend",), "any": ("cuda", "ascend")}


@dataclass(frozen=True)
class ReleaseResult:
    """How a wait ended: `holders` are the engine's processes still listed when it gave up."""

    released: bool
    waited_s: float
    holders: list[DeviceProcess] = field(default_factory=list)
    note: str = ""


def run_tool(argv: list[str]) -> str:
    """A device tool's stdout (10 s limit); raises as `subprocess.run(check=True)` does."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=True)
    return done.stdout


def wait_released(
    platform: str,
    pids: Collection[int],
    devices: Sequence[str] | None,
    timeout_s: float,
    *,
    run: Runner | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 0.5,
) -> ReleaseResult:
    """Wait until none of `pids` holds memory on `devices` (all devices when None).

    `platform` is `cuda` (polls nvidia-smi), `ascend` (polls npu-smi), `cpu` (nothing to wait
    for) or `any` (whichever of nvidia-smi and npu-smi is installed). `pids` is the torn-down
    engine's process tree; `devices` are names such as `cuda:0` or `npu:3`. `run` runs a tool's
    argv and returns its stdout (default: `run_tool`).
    """
    if platform == "cpu":
        return ReleaseResult(released=True, waited_s=0.0, note="cpu: no device memory")
    if platform not in _CANDIDATES:
        raise ValueError(f"unknown platform {platform!r}: expected cpu, cuda, ascend or any")
    wanted = frozenset(pids)
    if not wanted:
        return ReleaseResult(released=True, waited_s=0.0, note="no processes to wait for")
    on = None if devices is None else frozenset(devices)
    for candidate in _CANDIDATES[platform]:
        poll = _Poll(candidate, run or run_tool, wanted, on)
        result = poll.until_released(timeout_s, clock, sleep, poll_s)
        if result is not None:
            return result
    tools = " and ".join(_TOOLS[c] for c in _CANDIDATES[platform])
    return ReleaseResult(released=True, waited_s=0.0, note=f"{tools} not installed")


@dataclass
class _Poll:
    """Polling one tool for the processes of `wanted` on the devices `on`."""

    platform: str
    run: Runner
    wanted: frozenset[int]
    on: frozenset[str] | None

    def until_released(
        self,
        timeout_s: float,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        poll_s: float,
    ) -> ReleaseResult | None:
        """How the wait ended; None when the tool is not installed."""
        tool = _TOOLS[self.platform]
        read = process_reader(self.platform, self.run)
        started = clock()
        while True:
            try:
                listed = read()
            except FileNotFoundError:
                return None
            except (subprocess.SubprocessError, SmiParseError, OSError) as err:
                logger.warning("%s failed, not waiting for device memory: %s", tool, err)
                return ReleaseResult(True, clock() - started, note=f"{tool} failed: {err}")
            holders = [p for p in listed if self._ours(p)]
            waited = clock() - started
            if not holders:
                return ReleaseResult(released=True, waited_s=waited)
            if waited >= timeout_s:
                logger.warning(
                    "after %.1f s, %d engine process(es) still hold device memory: %s",
                    waited,
                    len(holders),
                    holders,
                )
                return ReleaseResult(False, waited, holders, note=f"{tool} still lists them")
            sleep(min(poll_s, timeout_s - waited))

    def _ours(self, process: DeviceProcess) -> bool:
        on_device = self.on is None or process.device in self.on
        return on_device and process.is_one_of(self.wanted)


def process_reader(platform: str, run: Runner) -> Callable[[], list[DeviceProcess]]:
    """Reads the processes on the host's GPUs (`cuda`) or NPUs (`ascend`)."""
    return _cuda_reader(run) if platform == "cuda" else _ascend_reader(run)


def _cuda_reader(run: Runner) -> Callable[[], list[DeviceProcess]]:
    """Processes on GPUs, named `cuda:INDEX` (GPUs are listed once, on the first read)."""
    names: dict[str, str] = {}

    def read() -> list[DeviceProcess]:
        if not names:
            names.update(gpu_devices(parse_nvidia_gpus(run(list(NVIDIA_GPU_QUERY)))))
        return parse_nvidia_apps(run(list(NVIDIA_APPS_QUERY)), names)

    return read


def _ascend_reader(run: Runner) -> Callable[[], list[DeviceProcess]]:
    return lambda: parse_npu_smi_info(run(list(NPU_SMI_INFO))).processes
