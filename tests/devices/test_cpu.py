"""`cpu_memory` must agree with vLLM's own `get_memory_node_info`, number for number."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.devices import DeviceMemory, cpu_memory

KIB = 1024
GIB = 1 << 30
# From the recorded node0_meminfo: MemTotal, and MemFree + Active(file) + Inactive(file) +
# SReclaimable = 9114760 + 1099124 + 759280 + 406608 kB.
RECORDED_TOTAL = 12019916 * KIB
RECORDED_AVAILABLE = 11379772 * KIB
UNLIMITED_V1 = "9223372036854771712"  # what cgroup v1 reports without a limit (this machine)
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "smi" / "node0_meminfo"


def make_root(tmp_path: Path, cgroup: dict[str, str] | None = None, meminfo: bool = True) -> Path:
    """A fake `/` with the recorded node0 meminfo and the given cgroup files."""
    if meminfo:
        node = tmp_path / "sys/devices/system/node/node0"
        node.mkdir(parents=True)
        shutil.copyfile(RECORDED, node / "meminfo")
    for name, value in (cgroup or {}).items():
        path = tmp_path / "sys/fs/cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    return tmp_path


CASES: dict[str, tuple[dict[str, str], bool]] = {
    "no-cgroup": ({}, True),
    "v1-unlimited": ({"memory/memory.limit_in_bytes": UNLIMITED_V1}, True),
    "v1-limit": (
        {
            "memory/memory.limit_in_bytes": str(8 * GIB),
            "memory/memory.usage_in_bytes": str(6 * GIB),
        },
        True,
    ),
    "v2-max": ({"memory.max": "max", "memory.current": str(GIB)}, True),
    "v2-limit-overused": ({"memory.max": str(4 * GIB), "memory.current": str(5 * GIB)}, True),
    "v2-limit-above-total": ({"memory.max": str(64 * GIB), "memory.current": str(GIB)}, True),
    "no-numa-node": ({}, False),
}


def test_recorded_meminfo(tmp_path: Path) -> None:
    assert cpu_memory(0, make_root(tmp_path)) == DeviceMemory(
        "cpu:node0", RECORDED_TOTAL, RECORDED_AVAILABLE
    )


def test_cgroup_v1_limit_clamps_total_and_available(tmp_path: Path) -> None:
    root = make_root(tmp_path, CASES["v1-limit"][0])
    assert cpu_memory(0, root) == DeviceMemory("cpu:node0", 8 * GIB, 2 * GIB)


def test_cgroup_v2_usage_over_limit_leaves_nothing(tmp_path: Path) -> None:
    root = make_root(tmp_path, CASES["v2-limit-overused"][0])
    assert cpu_memory(0, root) == DeviceMemory("cpu:node0", 4 * GIB, 0)


def test_without_node_meminfo_psutil_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = SimpleNamespace(total=16 * GIB, available=10 * GIB)
    monkeypatch.setattr("autotune.devices._cpu.psutil.virtual_memory", lambda: fake)
    assert cpu_memory(3, make_root(tmp_path, meminfo=False)) == DeviceMemory(
        "cpu:node3", 16 * GIB, 10 * GIB
    )


@pytest.fixture
def vllm_reading_from(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], Any]]:
    """vLLM's `get_memory_node_info`, made to read `/sys/...` below a fake root."""
    cru = pytest.importorskip("vllm.utils.cpu_resource_utils")
    real_exists = os.path.exists

    def reading(root: Path) -> Any:
        def moved(path: Any) -> Any:
            text = os.fspath(path)
            return str(root / text.lstrip("/")) if text.startswith("/sys/") else path

        monkeypatch.setattr(os.path, "exists", lambda path: real_exists(moved(path)))

        def moved_open(path: Any, *args: Any, **kwargs: Any) -> Any:
            return open(moved(path), *args, **kwargs)  # vLLM opens it in a `with`

        monkeypatch.setattr(cru, "open", moved_open, raising=False)
        cru.get_cgroup_memory_limit.cache_clear()
        return cru.get_memory_node_info(0)

    yield reading
    cru.get_cgroup_memory_limit.cache_clear()


@pytest.mark.parametrize("case", CASES)
def test_agrees_with_vllm(
    case: str, tmp_path: Path, vllm_reading_from: Callable[[Path], Any]
) -> None:
    cgroup, meminfo = CASES[case]
    root = make_root(tmp_path, cgroup, meminfo)
    ours = cpu_memory(0, root)
    theirs = vllm_reading_from(root)
    if meminfo:  # without it both ask psutil, whose numbers move between calls
        assert (ours.total_bytes, ours.available_bytes) == (
            theirs.total_memory,
            theirs.available_memory,
        )
    else:
        assert ours.total_bytes == theirs.total_memory


def test_agrees_with_vllm_on_this_machine() -> None:
    cru = pytest.importorskip("vllm.utils.cpu_resource_utils")
    for _ in range(10):  # available memory moves; compare when it held still across the read
        before = cpu_memory()
        theirs = cru.get_memory_node_info(0)
        after = cpu_memory()
        if before == after:
            break
    else:
        pytest.skip("node memory kept changing while it was read")
    assert (before.total_bytes, before.available_bytes) == (
        theirs.total_memory,
        theirs.available_memory,
    )
