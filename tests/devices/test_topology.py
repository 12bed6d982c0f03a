"""Topology matrices of `nvidia-smi topo -m` and `npu-smi info -t topo`, recorded real outputs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autotune.devices import SmiParseError, parse_topology
from autotune.devices._topology import bonded_links, link_rank


def test_npu_smi_topo_910b3_x8(smi_text: Callable[[str], str]) -> None:
    topology = parse_topology(smi_text("npu_smi_topo_910b3_x8.txt"))
    assert topology.devices == list(range(8))
    assert {topology.link(a, b) for a in range(8) for b in range(8) if a != b} == {"HCCS"}
    assert topology.link(3, 3) == "X"
    assert topology.cpu_affinity == {
        0: "144-167", 1: "144-167", 2: "96-119", 3: "96-119",
        4: "0-23", 5: "0-23", 6: "48-71", 7: "48-71",
    }  # fmt: skip
    assert topology.numa_affinity == {}  # npu-smi names CPUs, not NUMA nodes


def test_nvidia_smi_topo_dgx1_v100_x8(smi_text: Callable[[str], str]) -> None:
    topology = parse_topology(smi_text("nvidia_smi_topo_v100_x8_dgx1.txt"))
    assert topology.devices == list(range(8))  # the NIC rows and columns are not devices
    assert topology.link(0, 1) == "NV1"
    assert topology.link(0, 2) == "NV2"
    assert topology.link(0, 7) == "NV2"
    assert topology.link(0, 4) == "SYS"
    assert topology.link(5, 2) == "NV1"
    assert all(topology.link(a, b) == topology.link(b, a) for a in range(8) for b in range(8))
    assert topology.cpu_affinity[3] == "0-11,24-35"
    assert topology.cpu_affinity[4] == "12-23,36-47"
    assert topology.numa_affinity == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}


def test_nvidia_smi_topo_with_tabs_and_gpu_numa_id(smi_text: Callable[[str], str]) -> None:
    topology = parse_topology(smi_text("nvidia_smi_topo_rtx5090_x2_tabs.txt"))
    assert topology.links == {(0, 1): "PHB", (1, 0): "PHB"}
    assert topology.cpu_affinity == {0: "0-63", 1: "0-63"}
    assert topology.numa_affinity == {0: 0, 1: 0}


def test_affinity_not_available_is_left_out() -> None:
    # Made up (the shape of the recorded ones, affinities the tool could not give).
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV4\tN/A\tN/A\n"
        "GPU1\tNV4\t X \tN/A\tN/A\n"
    )
    topology = parse_topology(text)
    assert topology.link(0, 1) == "NV4"
    assert topology.cpu_affinity == {} and topology.numa_affinity == {}


@pytest.mark.parametrize(
    "text",
    ["", "No devices were found\n", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \n"],
)
def test_unreadable_matrices_raise(text: str) -> None:
    with pytest.raises(SmiParseError):
        parse_topology(text)


def test_link_ranks_order_interconnects_before_pcie() -> None:
    order = ["X", "NV2", "HCCS", "PIX", "PXB", "PHB", "NODE", "SYS", "NA"]
    ranks = [link_rank(link) for link in order]
    assert ranks == sorted(ranks) and ranks[0] == 0 and ranks[1] == ranks[2] == 1
    assert link_rank(None) == link_rank("NA") == 7
    assert bonded_links("NV12") == 12 and bonded_links("HCCS") == 0
