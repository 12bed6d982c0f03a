"""Reading the host's CPUs: cpulists, NUMA nodes, SMT siblings, the process's allowed CPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.devices import format_cpulist, parse_cpulist
from autotune.devices._numa import (
    allowed_cpus,
    binding_problem,
    core_groups,
    node_of,
    numa_cpus,
    online_cpus,
)
from devices.fake_host import fake_host


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8", [0, 1, 2, 3, 8]), ("5\n", [5]), ("", []), (" 0-1 , 4-5 ", [0, 1, 4, 5])],
)
def test_parse_cpulist(text: str, cpus: list[int]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a", "3-1", "1-", "-2", "0-3:2"])
def test_parse_cpulist_rejects_what_is_not_one(text: str) -> None:
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpulist(text)


def test_format_cpulist_is_the_inverse() -> None:
    assert format_cpulist([8, 0, 2, 1, 3, 3]) == "0-3,8"
    assert format_cpulist([]) == ""
    for text in ("0-11,24-35", "7", "0,2,4", "1-2,5-9,11"):
        assert format_cpulist(parse_cpulist(text)) == text


def test_nodes_siblings_and_allowed_cpus(tmp_path: Path) -> None:
    # Made up: two nodes of 4 CPUs (2 cores x 2 threads each) and a memory-only node 2.
    root = fake_host(
        tmp_path,
        {0: "0-1,4-5", 1: "2-3,6-7", 2: ""},
        siblings={0: "0,4", 4: "0,4", 1: "1,5", 5: "1,5"},
        allowed="0-5",
    )
    nodes = numa_cpus(root)
    assert nodes == {0: [0, 1, 4, 5], 1: [2, 3, 6, 7], 2: []}
    assert core_groups(nodes[0], root) == [[0, 4], [1, 5]]
    assert core_groups([2, 3], root) == [[2], [3]]  # no siblings listed: a core each
    assert core_groups([0, 1], root) == [[0], [1]]  # siblings outside the set are left out
    assert allowed_cpus(root) == {0, 1, 2, 3, 4, 5}
    assert node_of([2, 6], nodes) == 1
    assert node_of([0, 2], nodes) is None
    assert node_of([], nodes) is None


def test_without_sysfs_nothing_is_invented(tmp_path: Path) -> None:
    assert numa_cpus(tmp_path) == {}
    assert allowed_cpus(tmp_path) is None
    assert online_cpus(tmp_path)  # falls back to this process's affinity
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-15\n")
    assert online_cpus(tmp_path) == list(range(16))


def test_one_allowed_core_leaves_vllms_binding_no_reserved_core(tmp_path: Path) -> None:
    # Made up: a 2-core node, this process pinned to CPU 1 (as under `taskset -c 1`).
    root = fake_host(tmp_path, {0: "0-1"}, allowed="1")
    problem = binding_problem(root, environ={})
    assert problem is not None
    assert "one physical core of NUMA node 0 (CPUs 1)" in problem
    assert "reserves none" in problem
    # The user binds or reserves cores themselves: vLLM's automatic binding is not used.
    assert binding_problem(root, environ={"VLLM_CPU_OMP_THREADS_BIND": "1"}) is None
    assert binding_problem(root, environ={"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}) is None
    assert binding_problem(root, environ={"VLLM_CPU_OMP_THREADS_BIND": "auto"}) is not None


def test_two_allowed_cores_keep_one_reserved(tmp_path: Path) -> None:
    assert binding_problem(fake_host(tmp_path, {0: "0-1"}, allowed="0-1"), environ={}) is None


def test_two_threads_of_one_core_are_one_core(tmp_path: Path) -> None:
    # Made up: a "2 vCPU" cloud host: one physical core with SMT 2. vLLM binds one thread a core.
    root = fake_host(tmp_path, {0: "0-1"}, siblings={0: "0-1", 1: "0-1"}, allowed="0-1")
    problem = binding_problem(root, environ={})
    assert problem is not None and "(CPUs 0-1)" in problem


def test_the_first_node_with_allowed_cpus_is_the_one_bound(tmp_path: Path) -> None:
    # Made up: two 2-core nodes; this process may use CPU 1 of node 0 and both of node 1.
    root = fake_host(tmp_path, {0: "0-1", 1: "2-3"}, allowed="1-3")
    problem = binding_problem(root, environ={})
    assert problem is not None and "NUMA node 0 (CPUs 1)" in problem
