"""A folder laid out like `/` for the sysfs and procfs files that device discovery reads.

Node meminfo is the recorded `node0_meminfo` (tests/fixtures/smi/SOURCES.md) for every node; the
CPU layouts are made up for each test and say so there.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from autotune.devices import NPU_SMI_INFO, NPU_SMI_TOPO, NVIDIA_GPU_QUERY

SMI_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "smi"
RECORDED_MEMTOTAL = 12019916 * 1024  # MemTotal of node0_meminfo


def fake_host(
    root: Path,
    nodes: dict[int, str],
    *,
    siblings: dict[int, str] | None = None,
    allowed: str | None = None,
    model: str | None = "Test CPU @ 2.0GHz",
) -> Path:
    """Write NUMA nodes (`{node: cpulist}`), SMT siblings (`{cpu: cpulist}`), the process's
    `Cpus_allowed_list` and the CPU model under `root`; returns `root`."""
    for node, cpulist in nodes.items():
        folder = root / "sys/devices/system/node" / f"node{node}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(cpulist + "\n")
        shutil.copyfile(SMI_FIXTURES / "node0_meminfo", folder / "meminfo")
    for cpu, cpulist in (siblings or {}).items():
        folder = root / "sys/devices/system/cpu" / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(cpulist + "\n")
    proc = root / "proc/self"
    proc.mkdir(parents=True)
    if allowed is not None:
        (proc / "status").write_text(f"Name:\tpython\nCpus_allowed_list:\t{allowed}\n")
    if model is not None:
        (root / "proc/cpuinfo").write_text(f"processor\t: 0\nmodel name\t: {model}\n")
    return root


def tools(outputs: dict[tuple[str, ...], str | Exception]) -> Callable[[list[str]], str]:
    """A fake device-tool runner: each argv's recorded output (a fixture file name), or an
    exception to raise; an argv not listed is a tool that is not installed."""

    def run(argv: list[str]) -> str:
        key = tuple(argv)
        if key not in outputs:
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        output = outputs[key]
        if isinstance(output, Exception):
            raise output
        return (SMI_FIXTURES / output).read_text()

    return run


NPU_HOST = {
    NPU_SMI_INFO: "npu_smi_910b3_x8_topo_host.txt",
    NPU_SMI_TOPO: "npu_smi_topo_910b3_x8.txt",
}
GPU_HOST = {NVIDIA_GPU_QUERY: "nvidia_query_gpu_a10g_x4.csv"}


def kunpeng_like(root: Path) -> Path:
    """Made up to match the recorded 910B3 host's affinities: 8 NUMA nodes of 24 CPUs."""
    return fake_host(root, {n: f"{24 * n}-{24 * n + 23}" for n in range(8)})
