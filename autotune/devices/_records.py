"""The records every device reader returns (memory of one device, a process holding one), and
how a device tool is run."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from autotune.vocab.platform import Platform

ToolRunner = Callable[[list[str]], str]  # a device tool's argv -> its stdout
TOOL_TIMEOUT_S = 10.0
MIB = 1 << 20  # nvidia-smi reports MiB; npu-smi's "MB" columns are MiB too (HBM 65536 = 64 GiB)


class SmiParseError(ValueError):
    """A device tool printed something its parser does not understand."""


@dataclass(frozen=True)
class DeviceMemory:
    """Memory of one device, in bytes.

    `device` names it the way the tuner does: `cpu:node0`, `cuda:0` (the index nvidia-smi
    shows, not one relative to CUDA_VISIBLE_DEVICES), `npu:3` (the CANN runtime's id: npu-smi's
    on a whole host, the place in the listing in a container; see `_ascend.py`).
    """

    device: str
    total_bytes: int
    available_bytes: int

    @property
    def platform(self) -> Platform:
        """The vLLM platform whose memory checks apply here: cpu, cuda or ascend."""
        prefixes = {"cuda": Platform.CUDA, "npu": Platform.ASCEND}
        return prefixes.get(self.device.split(":")[0], Platform.CPU)


@dataclass(frozen=True)
class DeviceProcess:
    """A process that holds memory on a device, as the device tool reports it.

    `pid` is the pid the tool reports (the host's); `container_pid` is the pid inside a
    container where the tool reports one (npu-smi's `Process id in container`), else None.
    `used_bytes` is None where the tool cannot tell (`[N/A]`).
    """

    device: str
    pid: int
    used_bytes: int | None
    name: str = ""
    container_pid: int | None = None

    def is_one_of(self, pids: frozenset[int]) -> bool:
        """Whether this is one of `pids`, by host pid or by pid inside its container."""
        return self.pid in pids or (self.container_pid is not None and self.container_pid in pids)


def run_tool(argv: list[str]) -> str:
    """A device tool's stdout (10 s limit); raises as `subprocess.run(check=True)` does."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=True)
    return done.stdout
