"""nvidia-smi's CSV queries, parsed; the fixtures' values come from a real 4 x A10G table."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from autotune.devices import (
    DeviceMemory,
    DeviceProcess,
    NvidiaGpu,
    SmiParseError,
    gpu_devices,
    parse_nvidia_apps,
    parse_nvidia_gpus,
)

MIB = 1 << 20
UUID = "GPU-00000000-0000-0000-0000-00000000000{}"


def test_gpus(smi_text: Callable[[str], str]) -> None:
    gpus = parse_nvidia_gpus(smi_text("nvidia_query_gpu_a10g_x4.csv"))
    assert gpus[0] == NvidiaGpu(
        index=0,
        uuid=UUID.format(0),
        name="NVIDIA A10G",
        total_bytes=23028 * MIB,
        used_bytes=21963 * MIB,
        free_bytes=1065 * MIB,
    )
    assert [g.device for g in gpus] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert gpus[3].memory() == DeviceMemory("cuda:3", 23028 * MIB, 1063 * MIB)


def test_header_and_units_read_the_same(smi_text: Callable[[str], str]) -> None:
    assert parse_nvidia_gpus(smi_text("nvidia_query_gpu_a10g_x4_header.csv")) == parse_nvidia_gpus(
        smi_text("nvidia_query_gpu_a10g_x4.csv")
    )
    assert parse_nvidia_apps(smi_text("nvidia_compute_apps_a10g_x4_header.csv")) == (
        parse_nvidia_apps(smi_text("nvidia_compute_apps_a10g_x4.csv"))
    )


def test_csv_fixtures_match_the_recorded_table(smi_text: Callable[[str], str]) -> None:
    """The CSV fixtures are built from the table: its memory and processes must agree."""
    table = smi_text("nvidia_smi_a10g_x4_vllm_tp4.txt")
    used_total = [(int(u), int(t)) for u, t in re.findall(r"(\d+)MiB /\s+(\d+)MiB", table)]
    gpus = parse_nvidia_gpus(smi_text("nvidia_query_gpu_a10g_x4.csv"))
    assert [(g.used_bytes, g.total_bytes) for g in gpus] == [
        (u * MIB, t * MIB) for u, t in used_total
    ]
    rows = re.findall(r"\|\s+(\d) +N/A +N/A +(\d+) +C +\S+ +(\d+)MiB \|", table)
    apps = parse_nvidia_apps(smi_text("nvidia_compute_apps_a10g_x4.csv"), gpu_devices(gpus))
    assert [(p.device, p.pid, p.used_bytes) for p in apps] == [
        (f"cuda:{gpu}", int(pid), int(mib) * MIB) for gpu, pid, mib in rows
    ]


def test_apps_named_by_index_or_left_as_uuid(smi_text: Callable[[str], str]) -> None:
    text = smi_text("nvidia_compute_apps_a10g_x4.csv")
    gpus = parse_nvidia_gpus(smi_text("nvidia_query_gpu_a10g_x4.csv"))
    assert parse_nvidia_apps(text, gpu_devices(gpus))[1] == DeviceProcess(
        "cuda:1", 386, 21956 * MIB
    )
    assert parse_nvidia_apps(text)[1].device == UUID.format(1)


def test_no_processes_is_blank(smi_text: Callable[[str], str]) -> None:
    assert parse_nvidia_apps(smi_text("nvidia_compute_apps_empty.csv")) == []
    assert parse_nvidia_apps("gpu_uuid, pid, used_gpu_memory [MiB]\n") == []


def test_fields_nvidia_smi_cannot_give() -> None:
    # Per-process memory reads [N/A] under WDDM and in some containers; old GeForce drivers
    # answered [Not Supported] even for the pid; unified-memory GPUs (GB10) have no memory.
    apps = parse_nvidia_apps(
        f"{UUID.format(0)}, 4242, [N/A]\n{UUID.format(0)}, [Not Supported], [Not Supported]\n"
    )
    assert apps == [DeviceProcess(UUID.format(0), 4242, None)]
    (gpu,) = parse_nvidia_gpus(f"0, {UUID.format(0)}, NVIDIA GB10, [N/A], [N/A], [N/A]\n")
    assert (gpu.total_bytes, gpu.used_bytes, gpu.free_bytes) == (None, None, None)
    assert gpu.memory() is None


@pytest.mark.parametrize(
    "text",
    [
        "No devices were found\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        "zero, GPU-x, A10G, 1, 1, 1\n",
    ],
)
def test_other_output_is_an_error(text: str) -> None:
    with pytest.raises(SmiParseError):
        parse_nvidia_gpus(text)
    with pytest.raises(SmiParseError):
        parse_nvidia_apps(text)
