"""What the plain `npu-smi info` table says about Ascend NPUs and the processes using them.

The table (Atlas A2 / A3 hosts, npu-smi 24-26) gives per chip two rows,
`| NPU  Name | Health | Power(W) Temp(C) Hugepages |` and
`| Chip [Phy-ID] | Bus-Id | AICore(%) Memory-Usage(MB) HBM-Usage(MB) |`, then a process table
`| NPU  Chip | Process id | Process name | Process memory(MB) [| Process id in container] |` in
which an idle NPU has the line `No running processes found in NPU N`.

npu-smi numbers NPUs as the host does, the CANN runtime as the process sees them: in a
container given host NPUs 3-7, npu-smi lists 3-7 while `ASCEND_RT_VISIBLE_DEVICES` and
`torch.npu.set_device` take 0-4, the place of each in the container's listing (vllm-ascend
PR #16256, issue #16309). Each chip therefore gets its runtime id (`NpuDevice.id`): its place
in the listing by (NPU, chip); processes are named by it too (`npu:ID`), so that what the pool
leases, what the busy check reads and what the runtime opens are one numbering. On a whole
host the two agree (A2: the NPU id).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from autotune.devices._records import MIB, DeviceMemory, DeviceProcess, SmiParseError

NPU_SMI_INFO = ("npu-smi", "info")

_NPU_ROW = re.compile(r"^(\d+)\s+(\S*[A-Za-z]\S*)$")  # "0     910B3"; a chip row is all digits
_CHIP_ROW = re.compile(r"^(\d+)(?:\s+(\d+))?$")  # "0" (A2) or "1     15" (A3: chip, phy-id)
_USAGE = re.compile(r"(\d+)\s*/\s*(\d+)")  # "3408 / 65536", "41052/ 65536"
_IDLE = re.compile(r"No running processes found in NPU\s+(\d+)")


@dataclass(frozen=True)
class NpuDevice:
    """One NPU chip: `npu` and `chip` as npu-smi numbers them, HBM in bytes; `id` as the CANN
    runtime numbers it (`ASCEND_RT_VISIBLE_DEVICES`): its place in the listing.

    On Atlas A3 each NPU has two chips and `phy_id` is the chip's physical id; on A2 there is one
    chip (0) and no `phy_id`. Cards without an HBM column report their Memory-Usage instead.
    """

    npu: int
    chip: int
    name: str
    health: str
    bus_id: str
    hbm_total_bytes: int
    hbm_used_bytes: int
    phy_id: int | None = None
    logical: int | None = None  # set by `parse_npu_smi_info`: the place in the listing

    @property
    def id(self) -> int:
        return self.npu if self.logical is None else self.logical

    @property
    def device(self) -> str:
        return f"npu:{self.id}"

    def memory(self) -> DeviceMemory:
        free = self.hbm_total_bytes - self.hbm_used_bytes
        return DeviceMemory(self.device, self.hbm_total_bytes, free)


@dataclass(frozen=True)
class NpuSmiInfo:
    """The parsed `npu-smi info`: chips in (NPU, chip) order, processes (device `npu:ID`, the
    chip's runtime id), NPUs reported idle (as npu-smi numbers them)."""

    devices: list[NpuDevice] = field(default_factory=list)
    processes: list[DeviceProcess] = field(default_factory=list)
    idle_npus: list[int] = field(default_factory=list)


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Parse the plain `npu-smi info` table. Raises SmiParseError if it lists no NPU."""
    devices: list[NpuDevice] = []
    idle_npus: list[int] = []
    in_processes = False
    has_container_pid = False
    pending: tuple[int, str, str] | None = None  # the NPU row waiting for its chip row
    rows: list[tuple[int, int, DeviceProcess]] = []  # (npu, chip, process) as npu-smi says
    for line in text.splitlines():
        cells = _cells(line)
        if not cells:
            continue
        if "Process id" in line and "Process name" in line:
            in_processes = True
            has_container_pid = "in container" in line
        elif in_processes:
            _process_row(cells, has_container_pid, idle_npus, rows)
        elif (match := _NPU_ROW.match(cells[0])) and len(cells) >= 2:
            pending = (int(match[1]), match[2], cells[1])
        elif pending and (match := _CHIP_ROW.match(cells[0])) and len(cells) >= 3:
            devices.append(_device(pending, match, cells))
            pending = None
    if not devices:
        raise SmiParseError("npu-smi info lists no NPU")
    chips = sorted(devices, key=lambda d: (d.npu, d.chip))
    ids = {(d.npu, d.chip): k for k, d in enumerate(chips)}
    return NpuSmiInfo(
        devices=[replace(d, logical=ids[d.npu, d.chip]) for d in chips],
        processes=[replace(p, device=f"npu:{ids.get((npu, chip), npu)}") for npu, chip, p in rows],
        idle_npus=idle_npus,
    )


def _cells(line: str) -> list[str]:
    """The cells of a `| a | b |` table row; [] for borders and other lines."""
    stripped = line.strip()
    if not stripped.startswith("|"):
        return []
    return [cell.strip() for cell in stripped.strip("|").split("|")]


def _device(npu_row: tuple[int, str, str], chip: re.Match[str], cells: list[str]) -> NpuDevice:
    npu, name, health = npu_row
    usages = _USAGE.findall(cells[2])
    if not usages:
        raise SmiParseError(f"no memory usage in the chip row of NPU {npu}: {cells!r}")
    used, total = usages[-1]  # HBM-Usage is the last column; Memory-Usage (DDR) comes before it
    return NpuDevice(
        npu=npu,
        chip=int(chip[1]),
        phy_id=int(chip[2]) if chip[2] is not None else None,
        name=name,
        health=health,
        bus_id=cells[1],
        hbm_total_bytes=int(total) * MIB,
        hbm_used_bytes=int(used) * MIB,
    )


def _process_row(
    cells: list[str],
    has_container_pid: bool,
    idle_npus: list[int],
    rows: list[tuple[int, int, DeviceProcess]],
) -> None:
    if idle := _IDLE.search(cells[0]):
        idle_npus.append(int(idle[1]))
        return
    ids = _CHIP_ROW.match(cells[0])
    if ids is None or len(cells) < 4:
        return  # the header's second line, or something this parser does not know
    try:
        pid = int(cells[1])
        used_bytes = int(cells[3]) * MIB
    except ValueError as err:
        raise SmiParseError(f"unreadable process row: {cells!r}") from err
    container_pid = None
    if has_container_pid and len(cells) >= 5 and cells[4].isdigit():
        container_pid = int(cells[4])
    npu, chip = int(ids[1]), int(ids[2] or 0)
    process = DeviceProcess(f"npu:{npu}", pid, used_bytes, cells[2], container_pid)
    rows.append((npu, chip, process))
