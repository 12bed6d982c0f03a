"""How devices are linked, from the matrices of `nvidia-smi topo -m` and `npu-smi info -t topo`.

Both tools print the same shape: a header row of column names (`GPU0 .. GPUn`, NICs, then
`CPU Affinity`, `NUMA Affinity`, `GPU NUMA ID` where the tool knows them), one row per device
with the link to every column (`X` for itself) and its affinities, then a legend. Cells are
separated by tabs (nvidia-smi) or spaces (copies of it, npu-smi); either is read.

Links, nearest first: a direct device interconnect (`NV#`: # bonded NVLinks; `HCCS`, `HCCS_SW`,
`SIO` on Ascend), then the PCIe paths `PIX`/`PSB` (one switch), `PXB` (several switches), `PHB`
(the host bridge), `NODE` (host bridges of one NUMA node), `SYS` (across NUMA nodes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from autotune.devices._numa import parse_cpulist
from autotune.devices._records import SmiParseError

NVIDIA_TOPO = ("nvidia-smi", "topo", "-m")
NPU_SMI_TOPO = ("npu-smi", "info", "-t", "topo")

_ROW_NAME = re.compile(r"^(?:GPU|NPU)(\d+)$")
_NVLINK = re.compile(r"^NV(\d+)$")
_RANKS = {"PIX": 2, "PSB": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}
_INTERCONNECTS = frozenset({"HCCS", "HCCS_SW", "SIO"})
UNKNOWN_RANK = 7


def link_rank(link: str | None) -> int:
    """How far a link puts two devices apart: 0 self, 1 interconnect, 2-6 PIX .. SYS, 7 unknown."""
    if link is None:
        return UNKNOWN_RANK
    if link == "X":
        return 0
    if link in _INTERCONNECTS or _NVLINK.match(link):
        return 1
    return _RANKS.get(link, UNKNOWN_RANK)


def bonded_links(link: str | None) -> int:
    """The number of bonded NVLinks of an `NV#` link; 0 for any other."""
    match = _NVLINK.match(link or "")
    return int(match[1]) if match else 0


@dataclass(frozen=True)
class Topology:
    """The links between devices (by device id, both directions) and each device's affinities.

    `cpu_affinity` is the cpulist the tool names for a device; `numa_affinity` its NUMA node where
    the tool says (nvidia-smi's `NUMA Affinity`; npu-smi gives only CPUs).
    """

    links: dict[tuple[int, int], str] = field(default_factory=dict)
    cpu_affinity: dict[int, str] = field(default_factory=dict)
    numa_affinity: dict[int, int] = field(default_factory=dict)

    @property
    def devices(self) -> list[int]:
        return sorted({a for a, _ in self.links} | set(self.cpu_affinity))

    def link(self, a: int, b: int) -> str | None:
        """The link between two devices (`X` for one with itself); None where unknown."""
        return "X" if a == b else self.links.get((a, b))


def renumbered(topology: Topology, ids: dict[int, int]) -> Topology:
    """`topology` with device `a` called `ids[a]` (the tool's numbering to the runtime's);
    a device `ids` does not name is left out."""
    return Topology(
        links={
            (ids[a], ids[b]): link
            for (a, b), link in topology.links.items()
            if {a, b} <= ids.keys()
        },
        cpu_affinity={ids[a]: v for a, v in topology.cpu_affinity.items() if a in ids},
        numa_affinity={ids[a]: v for a, v in topology.numa_affinity.items() if a in ids},
    )


def parse_topology(text: str) -> Topology:
    """Parse a `nvidia-smi topo -m` or `npu-smi info -t topo` matrix.

    Rows of other columns (NICs) are skipped. Raises SmiParseError when no device row is found,
    or when a row has fewer link cells than the header has device columns.
    """
    header: list[str] | None = None
    rows: dict[int, list[str]] = {}
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].rstrip(":") == "Legend":
            break
        if header is None:
            if _ROW_NAME.match(tokens[0]) and len(tokens) > 1 and not _is_cell(tokens[1]):
                header = tokens
            continue
        if (match := _ROW_NAME.match(tokens[0])) is not None:
            rows[int(match[1])] = tokens[1:]
    if header is None or not rows:
        raise SmiParseError("no device matrix in the topology output")
    return _build(header, rows)


def _is_cell(token: str) -> bool:
    """Whether a token is a link cell (a row's second token) rather than a column name."""
    return token == "X" or link_rank(token) < UNKNOWN_RANK or token in ("NA", "N/A")


def _build(header: list[str], rows: dict[int, list[str]]) -> Topology:
    # The header's words after the link columns name the affinity columns, in this order.
    columns = header[: header.index("CPU")] if "CPU" in header else header
    words = " ".join(header[len(columns) :])
    has_cpu = words.startswith("CPU Affinity")
    has_numa = words.startswith("CPU Affinity NUMA Affinity")
    ids = {i: m[1] for i, name in enumerate(columns) if (m := _ROW_NAME.match(name))}
    links: dict[tuple[int, int], str] = {}
    cpu_affinity: dict[int, str] = {}
    numa_affinity: dict[int, int] = {}
    for device, cells in rows.items():
        if len(cells) < len(columns):
            raise SmiParseError(f"topology row of device {device} has too few cells: {cells!r}")
        for index, column_id in ids.items():
            if int(column_id) != device:
                links[(device, int(column_id))] = cells[index]
        rest = cells[len(columns) :]
        if has_cpu and rest and _is_cpulist(rest[0]):
            cpu_affinity[device] = rest[0]
        numa = rest[1] if has_cpu and len(rest) > 1 else None
        if has_numa and numa is not None and numa.isdigit():
            numa_affinity[device] = int(numa)
    return Topology(links, cpu_affinity, numa_affinity)


def _is_cpulist(token: str) -> bool:
    """Whether an affinity cell names CPUs (`0-11,24-35`), not `N/A`."""
    try:
        return bool(parse_cpulist(token))
    except ValueError:
        return False
