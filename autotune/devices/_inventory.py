"""What a host offers the tuner: its platform and devices (NPUs, GPUs or CPU NUMA nodes)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from autotune.devices._topology import Topology
from autotune.vocab.platform import Platform

DeviceKind = Literal["npu", "gpu", "cpu"]

# The variable each platform's runtime reads for the devices a process may use: a user on a
# shared host sets it for every program, and a lease sets it for each trial.
VISIBLE_DEVICES: dict[str, str] = {  # keyed by Platform members
    Platform.CUDA: "CUDA_VISIBLE_DEVICES",
    Platform.ASCEND: "ASCEND_RT_VISIBLE_DEVICES",
}


class DeviceError(ValueError):
    """Devices that cannot be found or given as asked; the message is one line for the user."""


@dataclass(frozen=True)
class Device:
    """One device a trial can be given.

    `id` is what the platform's visibility variable takes: the NPU's logical id
    (`ASCEND_RT_VISIBLE_DEVICES`), the GPU's nvidia-smi index (`CUDA_VISIBLE_DEVICES` with
    `CUDA_DEVICE_ORDER=PCI_BUS_ID`), or on CPU the NUMA node (or core slot, see `split_cpu`).
    Memory is in bytes, None where the tool does not report it; on CPU it is the node's memory as
    vLLM counts it. `cores` is a cpulist: the CPU affinity of an accelerator, a CPU device's own
    cores.
    """

    id: int
    name: str
    total_bytes: int | None
    used_bytes: int | None
    kind: DeviceKind
    numa_node: int | None = None
    cores: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Inventory:
    """The devices of one platform on this host, ordered by id, and how they are linked;
    `source` is what they were read from (NVML or nvidia-smi, npu-smi, the NUMA nodes)."""

    platform: Platform
    devices: list[Device]
    topology: Topology | None = field(default=None, compare=False)
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "platform", Platform(self.platform))  # "cpu" read back too
        if not self.source:
            default = {
                Platform.ASCEND: "npu-smi",
                Platform.CUDA: "nvidia-smi",
                Platform.CPU: "NUMA nodes",
            }
            object.__setattr__(self, "source", default[self.platform])

    @property
    def ids(self) -> list[int]:
        return [device.id for device in self.devices]

    def device(self, device_id: int) -> Device:
        for device in self.devices:
            if device.id == device_id:
                return device
        raise KeyError(device_id)

    def to_dict(self) -> dict[str, object]:
        """The platform and devices as plain JSON-ready values."""
        return {"platform": self.platform.value, "devices": [d.to_dict() for d in self.devices]}
