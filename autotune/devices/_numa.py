"""The host's CPUs as the kernel lists them: NUMA nodes and their CPUs, SMT siblings, allowed CPUs.

Everything is read under `root` (a folder laid out like `/`, for tests) from sysfs and procfs, in
the kernel's cpulist format (`0-3,8-11`): `sys/devices/system/node/nodeN/cpulist`,
`sys/devices/system/cpu/online`, `sys/devices/system/cpu/cpuN/topology/thread_siblings_list`
and the `Cpus_allowed_list` of `proc/self/status`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

_NODE_DIR = re.compile(r"^node(\d+)$")


def parse_cpulist(text: str) -> list[int]:
    """`0-3,8` -> [0, 1, 2, 3, 8]; an empty list (a memory-only node) -> []."""
    cpus: list[int] = []
    for item in text.strip().split(","):
        item = item.strip()
        if not item:
            continue
        first, dash, last = item.partition("-")
        try:
            low, high = int(first), int(last if dash else first)
        except ValueError as err:
            raise ValueError(f"not a CPU list: {text.strip()!r}") from err
        if low < 0 or high < low:
            raise ValueError(f"not a CPU list: {text.strip()!r}")
        cpus.extend(range(low, high + 1))
    return cpus


def format_cpulist(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> `0-3,8` (sorted; a number listed twice is written once)."""
    ordered = sorted(set(cpus))
    runs: list[str] = []
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            low, high = ordered[start], ordered[i - 1]
            runs.append(str(low) if low == high else f"{low}-{high}")
            start = i
    return ",".join(runs)


def numa_cpus(root: Path = Path("/")) -> dict[int, list[int]]:
    """The CPUs of each NUMA node (a memory-only node has none); {} where no node is exposed."""
    nodes_dir = root / "sys/devices/system/node"
    nodes: dict[int, list[int]] = {}
    if not nodes_dir.is_dir():
        return nodes
    for entry in nodes_dir.iterdir():
        match = _NODE_DIR.match(entry.name)
        if match is None:
            continue
        text = _read(entry / "cpulist")
        nodes[int(match[1])] = parse_cpulist(text) if text is not None else []
    return dict(sorted(nodes.items()))


def online_cpus(root: Path = Path("/")) -> list[int]:
    """The online CPUs (`sys/devices/system/cpu/online`, else this process's affinity)."""
    text = _read(root / "sys/devices/system/cpu/online")
    if text is not None:
        return parse_cpulist(text)
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))  # pragma: no cover - not Linux


def allowed_cpus(root: Path = Path("/")) -> set[int] | None:
    """The CPUs this process may run on (`Cpus_allowed_list`); None where procfs does not say.

    In a container limited with a cpuset, NUMA nodes still list every CPU of the host; only these
    can be bound to.
    """
    text = _read(root / "proc/self/status")
    for line in (text or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return set(parse_cpulist(line.split(":", 1)[1]))
    return None


def core_groups(cpus: Iterable[int], root: Path = Path("/")) -> list[list[int]]:
    """`cpus` grouped by physical core (SMT siblings together), ordered by their first CPU.

    A CPU whose siblings the kernel does not list is a core of its own. Siblings outside `cpus`
    are left out.
    """
    wanted = sorted(set(cpus))
    members = set(wanted)
    seen: set[int] = set()
    groups: list[list[int]] = []
    for cpu in wanted:
        if cpu in seen:
            continue
        path = root / f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        text = _read(path)
        siblings = set(parse_cpulist(text)) if text else {cpu}
        group = sorted((siblings & members) | {cpu})
        seen.update(group)
        groups.append(group)
    return groups


def node_of(cpus: Iterable[int], nodes: dict[int, list[int]]) -> int | None:
    """The NUMA node that holds all of `cpus`; None when they span nodes or none is known."""
    wanted = set(cpus)
    if not wanted:
        return None
    for node, node_cpus in nodes.items():
        if wanted <= set(node_cpus):
            return node
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


# vLLM's automatic CPU binding (`VLLM_CPU_OMP_THREADS_BIND=auto`, its default; vLLM 0.32
# `vllm/utils/ompmultiprocessing.py: _get_autobind_cpu_ids`) gives a TP-1 worker the allowed
# CPUs of the first allowed NUMA node, one per physical core on x86, and keeps the last of them
# for the engine's own process. With one core it logs "Selected CPU core number (1) should be
# greater than reserved CPU core number (1)" and reserves none. Measured on a 2-core AMD EPYC
# (2026-12-07, nothing else running, engines alternated): `[taskset -c 1] python -m
# vllm.entrypoints.openai.api_server --model TINY --max-model-len 1024`, then 5 runs of
# `autotune bench --workload random:input=256,output=64,prompts=64 --concurrency 32`; runs
# 2-5 of two engines under taskset served 1,442-1,799 output tok/s (medians 1,545 and 1,640),
# of two with both cores 1,522-2,134 (1,935 and 1,645). A load client pinned beside such an
# engine made it slower still (805-1,634 tok/s on a 2-core Xeon).
_RESERVED_KEYS = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU")


def binding_problem(root: Path = Path("/"), environ: Mapping[str, str] | None = None) -> str | None:
    """Why vLLM's automatic binding would leave a CPU engine started from this process no
    reserved core (this process's affinity holds one physical core of its first NUMA node);
    None when it reserves one, or the user binds or reserves cores themselves."""
    env = os.environ if environ is None else environ
    if env.get(_RESERVED_KEYS[0], "auto") != "auto" or _RESERVED_KEYS[1] in env:
        return None
    allowed = allowed_cpus(root)
    nodes = numa_cpus(root) or {0: online_cpus(root)}
    usable = [
        (node, [cpu for cpu in cpus if allowed is None or cpu in allowed])
        for node, cpus in nodes.items()
    ]
    first = next(((node, cpus) for node, cpus in usable if cpus), None)
    if first is None or len(core_groups(first[1], root)) > 1:
        return None  # no CPU at all is discovery's error to report
    node, cpus = first
    return (
        f"this process may run on one physical core of NUMA node {node} (CPUs "
        f"{format_cpulist(cpus)}): vLLM's CPU worker takes it and reserves none for the "
        "engine's own process, so every trial measures an engine slower than `vllm serve` "
        "with two cores would be"
    )
