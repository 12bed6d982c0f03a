"""Waiting, after a trial engine is torn down, until its processes hold no device memory.

A CUDA or NPU worker can hold its device memory for a while after its process group was
signalled (the driver tears the context down); a trial launched in that window sees less free
memory and may fail for a reason that is not its own. `wait_released` polls the device tool
until none of the engine's pids is listed on the devices, or the timeout passes.

It never raises for the tool: on CPU, where the tool is not installed, or where it fails, it
answers "released" at once (with a note), since there is nothing more it can find out.

Inside a container that does not share the host's pid namespace, nvidia-smi (and npu-smi
without its `Process id in container` column) lists host pids, which never match the engine's:
the pid wait then ends at once. So the wait also reads the memory itself: given what the
engine's devices used before its launch (`used_memory`, by device name), it waits until each is
back to that level (within `SLACK_BYTES`), as the device reports it. That covers the idle level
too (an idle 910B shows about 3.3 GB in use, not 0). A device still above its level at the
timeout is a warning, not an error: another job may have taken memory on it meanwhile, which
this wait cannot tell from the engine's.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from autotune.devices._ascend import NPU_SMI_INFO, parse_npu_smi_info
from autotune.devices._inventory import VISIBLE_DEVICES
from autotune.devices._nvidia import gpu_devices
from autotune.devices._nvml import nvidia_reader
from autotune.devices._records import DeviceProcess, SmiParseError, ToolRunner, run_tool
from autotune.vocab.platform import AnyPlatform, Platform

logger = logging.getLogger(__name__)

_TOOLS = {Platform.CUDA: "nvidia-smi", Platform.ASCEND: "npu-smi"}
_CANDIDATES: dict[str, tuple[Platform, ...]] = {
    Platform.CUDA: (Platform.CUDA,),
    Platform.ASCEND: (Platform.ASCEND,),
    "any": (Platform.CUDA, Platform.ASCEND),
}
SLACK_BYTES = 512 << 20  # memory above the level before the launch that counts as released


@dataclass(frozen=True)
class ReleaseResult:
    """How a wait ended: `holders` are the engine's processes still listed when it gave up."""

    released: bool
    waited_s: float
    holders: list[DeviceProcess] = field(default_factory=list)
    note: str = ""


def wait_released(
    platform: AnyPlatform,
    pids: Collection[int],
    devices: Sequence[str] | None,
    timeout_s: float,
    *,
    run: ToolRunner | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 0.5,
    before: Mapping[str, int] | None = None,
) -> ReleaseResult:
    """Wait until none of `pids` holds memory on `devices` (all devices when None), then,
    with `before` (bytes in use per device name before the launch), until each of those
    devices is back to its level (see the module's docstring).

    `platform` is `cuda` (polls nvidia-smi), `ascend` (polls npu-smi), `cpu` (nothing to wait
    for) or `any` (whichever of nvidia-smi and npu-smi is installed). `pids` is the torn-down
    engine's process tree; `devices` are names such as `cuda:0` or `npu:3`. `run` runs a tool's
    argv and returns its stdout (default: `run_tool`).
    """
    result = _pids_released(platform, pids, devices, timeout_s, run, clock, sleep, poll_s)
    if not result.released or not before:
        return result
    left = max(0.0, timeout_s - result.waited_s)
    memory = _memory_back(platform, before, left, run or run_tool, clock, sleep, poll_s)
    note = "; ".join(n for n in (result.note, memory.note) if n)
    return ReleaseResult(True, result.waited_s + memory.waited_s, note=note)


def _pids_released(
    platform: AnyPlatform,
    pids: Collection[int],
    devices: Sequence[str] | None,
    timeout_s: float,
    run: ToolRunner | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    poll_s: float,
) -> ReleaseResult:
    if platform == Platform.CPU:
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

    platform: Platform
    run: ToolRunner
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


def process_reader(platform: Platform, run: ToolRunner) -> Callable[[], list[DeviceProcess]]:
    """Reads the processes on the host's GPUs (`cuda`) or NPUs (`ascend`)."""
    return _cuda_reader(run) if platform == Platform.CUDA else _ascend_reader(run)


def _cuda_reader(run: ToolRunner) -> Callable[[], list[DeviceProcess]]:
    """Processes on GPUs, named `cuda:INDEX` (GPUs are listed once, on the first read)."""
    reader = nvidia_reader(run)
    names: dict[str, str] = {}

    def read() -> list[DeviceProcess]:
        if not names:
            names.update(gpu_devices(reader.gpus()))
        return reader.apps(names)

    return read


def _ascend_reader(run: ToolRunner) -> Callable[[], list[DeviceProcess]]:
    return lambda: parse_npu_smi_info(run(list(NPU_SMI_INFO))).processes


def memory_before_launch(
    platform: AnyPlatform, env: Mapping[str, str], run: ToolRunner | None = None
) -> dict[str, int]:
    """`used_memory` of the devices an engine started with `env` will see (its
    `CUDA_VISIBLE_DEVICES` / `ASCEND_RT_VISIBLE_DEVICES`; every device without one): the
    levels `wait_released` waits for after its teardown."""
    used = used_memory(platform, run)
    visible = env.get(VISIBLE_DEVICES.get(platform, ""), None)
    if visible is None:
        return used
    prefix = "cuda" if platform == Platform.CUDA else "npu"
    names = {f"{prefix}:{item.strip()}" for item in visible.split(",") if item.strip()}
    return {name: level for name, level in used.items() if name in names}


def used_memory(platform: AnyPlatform, run: ToolRunner | None = None) -> dict[str, int]:
    """Bytes in use per device name (`cuda:0`, `npu:3`), as the tool reports them; {} on CPU,
    and where the tool is missing or fails (then nothing is waited for by memory)."""
    if platform not in (Platform.CUDA, Platform.ASCEND):
        return {}
    runner = run or run_tool
    try:
        if platform == Platform.CUDA:
            gpus = nvidia_reader(runner).gpus()
            return {g.device: g.used_bytes for g in gpus if g.used_bytes is not None}
        npus = parse_npu_smi_info(runner(list(NPU_SMI_INFO))).devices
        return {d.device: d.hbm_used_bytes for d in npus}
    except (subprocess.SubprocessError, SmiParseError, OSError) as err:
        logger.debug("cannot read the devices' memory: %s", err)
        return {}


def _memory_back(
    platform: AnyPlatform,
    before: Mapping[str, int],
    timeout_s: float,
    run: ToolRunner,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    poll_s: float,
) -> ReleaseResult:
    """Wait until each device of `before` uses at most its level then plus `SLACK_BYTES`."""
    started = clock()
    while True:
        now = used_memory(platform, run)
        above = {
            name: now[name] - level
            for name, level in before.items()
            if name in now and now[name] > level + SLACK_BYTES
        }
        waited = clock() - started
        if not above:
            return ReleaseResult(True, waited)
        if waited >= timeout_s:
            shown = ", ".join(f"{name} +{extra / 2**30:.1f} GiB" for name, extra in above.items())
            logger.warning(
                "after %.1f s the engine's devices still use more than before its launch (%s): "
                "the driver keeps its memory, or another job took some",
                waited,
                shown,
            )
            return ReleaseResult(True, waited, note=f"still above the level before: {shown}")
        sleep(min(poll_s, timeout_s - waited))
