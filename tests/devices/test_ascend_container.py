"""A pod given host NPUs 4-7 (stand-in): npu-smi shows 4-7, the CANN runtime numbers them 0-3.

vllm-ascend PR #16256 and issue #16309 describe the container (host NPUs 3-7 are 0-4 inside it;
`ASCEND_RT_VISIBLE_DEVICES` and `torch.npu.set_device` take the inside numbers). The stand-in
is the recorded 910B3 x8 host's `npu-smi info` and topology matrix cut to NPUs 4-7, as a
container's npu-smi prints them, with one process of another job on NPU 5. Before the fix, a
lease of the first NPU set `ASCEND_RT_VISIBLE_DEVICES=4`: a device the runtime in the pod does
not have (HAMi#1894: `open device 1 failed`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.devices import (
    NPU_SMI_INFO,
    NPU_SMI_TOPO,
    DevicePool,
    device_memory,
    discover,
    discover_selected,
    parse_npu_smi_info,
    plan_lanes,
)
from devices.fake_host import SMI_FIXTURES, kunpeng_like

MIB = 1 << 20
MOUNTED = (4, 5, 6, 7)
PROCESSES = """\
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 4                                                            |
+===========================+===============+====================================================+
| 5       0                 | 2718281       | python                   | 40960                   |
+===========================+===============+====================================================+
| No running processes found in NPU 6                                                            |
+===========================+===============+====================================================+
| No running processes found in NPU 7                                                            |
+===========================+===============+====================================================+
"""


def _info() -> str:
    """The host's table with the blocks of NPUs 0-3 left out, then the process table."""
    lines = (SMI_FIXTURES / "npu_smi_910b3_x8_topo_host.txt").read_text().splitlines()
    head, body = lines[:6], lines[6:]
    blocks = [body[k : k + 3] for k in range(0, len(body), 3)]
    kept = [b for b in blocks if int(re.match(r"\|\s*(\d+)", b[0])[1]) in MOUNTED]  # type: ignore[index]
    return "\n".join([*head, *(line for b in kept for line in b)]) + "\n" + PROCESSES


def _topology() -> str:
    """The host's matrix, rows and columns of NPUs 4-7 only."""
    lines = (SMI_FIXTURES / "npu_smi_topo_910b3_x8.txt").read_text().splitlines()
    keep = [0, *(1 + n for n in MOUNTED), 9, 10]  # row label, NPU4-7, the affinity's two cells
    out = []
    for line in lines:
        cells = line.split()
        if line.startswith("\t") or (cells and cells[0] in {f"NPU{n}" for n in MOUNTED}):
            header = line.startswith("\t")
            picked = (
                [f"NPU{n}" for n in MOUNTED] + ["CPU", "Affinity"]
                if header
                else [cells[k] for k in keep if k < len(cells)]
            )
            out.append(("\t   " if header else "") + "       ".join(picked))
        elif cells and cells[0].startswith("NPU"):
            continue
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def pod() -> Callable[[list[str]], str]:
    outputs = {NPU_SMI_INFO: _info(), NPU_SMI_TOPO: _topology()}

    def run(argv: list[str]) -> str:
        if tuple(argv) not in outputs:
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        return outputs[tuple(argv)]

    return run


def test_the_stand_in_is_what_npu_smi_in_the_pod_prints() -> None:
    info = parse_npu_smi_info(_info())
    assert [d.npu for d in info.devices] == list(MOUNTED)
    assert info.idle_npus == [4, 6, 7]


def test_the_pods_npus_are_numbered_as_the_runtime_numbers_them(tmp_path: Path) -> None:
    inventory = discover("ascend", run=pod(), root=kunpeng_like(tmp_path))
    assert inventory.ids == [0, 1, 2, 3]
    assert [d.name for d in inventory.devices] == [f"910B3 (npu-smi NPU {n})" for n in MOUNTED]
    # The topology follows: NPU 4's affinity (0-23) is device 0's, NPU 6's (48-71) device 2's.
    assert [d.cores for d in inventory.devices] == ["0-23", "0-23", "48-71", "48-71"]
    assert inventory.topology is not None and inventory.topology.link(0, 3) == "HCCS"
    assert device_memory("ascend", [1], run=pod()) is not None
    used = {d.id: d.used_bytes for d in inventory.devices}
    assert used[0] == 3314 * MIB


def test_a_lease_sets_the_runtimes_ids_and_the_busy_npu_is_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pool, lanes = plan_lanes(
        "ascend", "auto", busy_share=0.5, run=pod(), root=kunpeng_like(tmp_path)
    )
    assert pool is not None and lanes == 3
    # npu-smi's NPU 5 (a process of another job on it) is the runtime's 1.
    assert [d.id for d in pool.devices] == [0, 2, 3]
    assert "leaving ascend 1 out of the study: another job holds it" in caplog.text
    with pool.acquire(1) as lease:
        assert lease.env["ASCEND_RT_VISIBLE_DEVICES"] in {"0", "2", "3"}


def test_an_inherited_selection_is_read_in_the_runtimes_numbers(tmp_path: Path) -> None:
    env = {"ASCEND_RT_VISIBLE_DEVICES": "2,3"}
    inventory = discover_selected("ascend", None, run=pod(), root=tmp_path, env=env)
    assert [(d.id, d.name) for d in inventory.devices] == [
        (2, "910B3 (npu-smi NPU 6)"),
        (3, "910B3 (npu-smi NPU 7)"),
    ]
    pool = DevicePool(inventory, host_locks=False)
    with pool.acquire(2) as lease:
        assert lease.env["ASCEND_RT_VISIBLE_DEVICES"] == "2,3"
