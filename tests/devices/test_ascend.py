"""`npu-smi info` tables recorded on Atlas A2 and A3 hosts, parsed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autotune.devices import DeviceMemory, DeviceProcess, NpuDevice, SmiParseError
from autotune.devices import parse_npu_smi_info as parse

MIB = 1 << 20


def test_a2_host_with_one_process(smi_text: Callable[[str], str]) -> None:
    info = parse(smi_text("npu_smi_910b3_x8_one_process.txt"))
    assert [d.npu for d in info.devices] == list(range(8))
    assert {(d.chip, d.phy_id, d.name, d.health) for d in info.devices} == {
        (0, None, "910B3", "OK")
    }
    assert info.devices[2] == NpuDevice(
        npu=2,
        chip=0,
        name="910B3",
        health="OK",
        bus_id="0000:81:00.0",
        hbm_total_bytes=65536 * MIB,
        hbm_used_bytes=41052 * MIB,  # printed `41052/ 65536`, without the space
        logical=2,  # a whole host: the runtime's id is the NPU's
    )
    assert info.devices[2].memory() == DeviceMemory("npu:2", 65536 * MIB, (65536 - 41052) * MIB)
    assert info.processes == [DeviceProcess("npu:2", 1333928, 37709 * MIB, name="")]
    assert info.idle_npus == [0, 1, 3, 4, 5, 6, 7]


def test_a2_host_idle(smi_text: Callable[[str], str]) -> None:
    info = parse(smi_text("npu_smi_910b3_x8_idle.txt"))
    assert len(info.devices) == 8
    assert info.devices[0].hbm_used_bytes == 3440 * MIB
    assert info.processes == []
    assert info.idle_npus == list(range(8))


def test_a3_host_two_chips_per_npu(smi_text: Callable[[str], str]) -> None:
    info = parse(smi_text("npu_smi_a3_ascend910_x8_processes.txt"))
    assert [(d.npu, d.chip, d.phy_id) for d in info.devices] == [
        (npu, chip, 2 * npu + chip) for npu in range(8) for chip in (0, 1)
    ]
    assert info.devices[1].health == "OK"  # chip 1's row prints its power as `-`
    assert info.devices[1].hbm_used_bytes == 52948 * MIB
    assert len(info.processes) == 14
    # Processes are named by the chip's runtime id, as the pool leases it: NPU 6 chip 1 is 13.
    assert [d.id for d in info.devices] == list(range(16))
    held = {p.device for p in info.processes}
    assert held == {f"npu:{k}" for k in (0, 1, 2, 3, 12, 13, 14, 15)}
    # One TP worker shows up on both chips of NPU 0.
    assert [(p.device, p.used_bytes) for p in info.processes if p.pid == 3328327] == [
        ("npu:0", 133 * MIB),
        ("npu:1", 50119 * MIB),
    ]
    assert info.idle_npus == [2, 3, 4, 5]


def test_newer_table_with_container_pids(smi_text: Callable[[str], str]) -> None:
    text = smi_text("npu_smi_910b4_x1_container_column.txt")
    info = parse(text)
    assert info.devices[0].hbm_total_bytes == 32768 * MIB
    assert info.processes == []
    assert info.idle_npus == [0]
    # The same table with a process started in a container (host pid, container pid); the row
    # is laid out as npu-smi 26 prints it.
    busy = text.replace(
        "| No running processes found in NPU 0                           "
        "                                                   |",
        "| 0       0                 | 485946        | python             "
        "| 5175                  | 131                     |",
    )
    (process,) = parse(busy).processes
    assert process == DeviceProcess("npu:0", 485946, 5175 * MIB, "python", container_pid=131)
    assert process.is_one_of(frozenset({131}))
    assert process.is_one_of(frozenset({485946}))
    assert not process.is_one_of(frozenset({5175}))


@pytest.mark.parametrize("text", ["", "not a table\n", "| NPU   Name | Health |\n"])
def test_no_table_is_an_error(text: str) -> None:
    with pytest.raises(SmiParseError):
        parse(text)
