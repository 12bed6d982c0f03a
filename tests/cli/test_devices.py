"""`autotune devices`, with the device-tool runner and the sysfs root replaced by fakes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from devices.fake_host import fake_host, tools
from typer.testing import CliRunner, Result

from autotune.cli import _devices, app
from autotune.devices import NPU_SMI_INFO, NPU_SMI_TOPO

NPU_HOST = {
    NPU_SMI_INFO: "npu_smi_910b3_x8_topo_host.txt",
    NPU_SMI_TOPO: "npu_smi_topo_910b3_x8.txt",
}


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Made up: 8 NUMA nodes of 24 CPUs, as the recorded 910B3 host's affinities suggest."""
    root = fake_host(tmp_path, {n: f"{24 * n}-{24 * n + 23}" for n in range(8)})
    monkeypatch.setattr(_devices, "ROOT", root)
    return root


def devices(monkeypatch: pytest.MonkeyPatch, outputs: dict, *args: str) -> Result:
    monkeypatch.setattr(_devices, "run_tool", tools(outputs))
    return CliRunner().invoke(app, ["devices", *args])


def error_line(result: Result) -> str:
    """The single `error: ...` line of a command that failed on its input (exit 2)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_table_of_npus(monkeypatch: pytest.MonkeyPatch, host: Path) -> None:
    result = devices(monkeypatch, NPU_HOST)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "ascend devices (npu-smi)" in out
    for header in ("id", "name", "memory total", "used", "NUMA", "cores"):
        assert header in out
    row0 = next(line for line in out.splitlines() if "144-167" in line)
    for cell in ("0", "910B3", "64.0 GiB", "3.2 GiB", "6"):
        assert cell in row0
    assert sum("910B3" in line for line in out.splitlines()) == 8


def test_json_with_a_device_list(monkeypatch: pytest.MonkeyPatch, host: Path) -> None:
    result = devices(monkeypatch, NPU_HOST, "--devices", "0-3,6", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed["platform"] == "ascend"
    assert [d["id"] for d in listed["devices"]] == [0, 1, 2, 3, 6]
    assert listed["devices"][4] == {
        "id": 6,
        "name": "910B3",
        "total_bytes": 65536 << 20,
        "used_bytes": 3314 << 20,
        "kind": "npu",
        "numa_node": 2,
        "cores": "48-71",
    }


def test_cpu_when_no_tool_is_installed(monkeypatch: pytest.MonkeyPatch, host: Path) -> None:
    result = devices(monkeypatch, {}, "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed["platform"] == "cpu"
    assert [d["cores"] for d in listed["devices"]][:2] == ["0-23", "24-47"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--devices", "0-3,9"], "error: no ascend device 9 on this host: available are 0-7"),
        (["--devices", "3-1"], "error: bad range '3-1' in --devices '3-1'"),
        (["--devices", "1,1"], "error: device 1 is listed twice in --devices '1,1'"),
        (["--devices", ""], "error: --devices is empty"),
        (["--platform", "cuda"], "error: nvidia-smi is not installed: cannot list cuda devices"),
        (["--platform", "gpu"], "error: unknown platform 'gpu'"),
    ],
)
def test_bad_input_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, host: Path, args: list[str], message: str
) -> None:
    assert error_line(devices(monkeypatch, NPU_HOST, *args)).startswith(message)
