"""NVIDIA GPUs through NVML, and nvidia-smi where NVML cannot be loaded: the two readers give
one answer on the same host (the simulated one of tests/sim_devices.py, whose nvidia-smi
stand-in prints the recorded formats and whose NVML stand-in is tests/sim_nvml.py)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import sim_nvml
from sim_devices import Host, allocate, install

from autotune.devices import (
    NvmlReader,
    SmiParseError,
    device_memory,
    discover,
    gpu_compute_capability,
    nvidia_reader,
    process_reader,
    run_tool,
)
from autotune.devices._nvidia import SmiReader
from autotune.devices._release import used_memory

HOSTS = {
    # nvidia_smi_topo_sim_x4.txt: PCIe only, two GPUs per bridge, one NUMA node per pair.
    "a10g-x4": Host.cuda_a10g({3: 20000}),
    # Every pair NV12 through NVSwitches, as an 8x A100 SXM DGX prints it.
    "a100-x8": Host("cuda", 8, 81920, 500, {1: 30000}, name="NVIDIA A100-SXM4-80GB",
                    compute_cap="8.0"),
}  # fmt: skip


def smi(argv: list[str]) -> str:
    """nvidia-smi as the tuner runs it, passed explicitly: the reader it gets is SmiReader."""
    return run_tool(argv)


@pytest.fixture(params=sorted(HOSTS))
def host(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    state = tmp_path / "sim"
    monkeypatch.setenv(
        "PATH", f"{install(state, HOSTS[request.param])}{os.pathsep}{os.environ['PATH']}"
    )
    monkeypatch.setenv("SIM_DEVICES", str(state))
    monkeypatch.setitem(sys.modules, "pynvml", sim_nvml)
    # This process holds 90% of the first free GPU, as a trial's engine would.
    allocate(state, {"CUDA_VISIBLE_DEVICES": "0"}, 1, 0.9)
    return HOSTS[request.param]


def test_nvml_and_nvidia_smi_read_the_same_host(host: Host) -> None:
    assert isinstance(nvidia_reader(), NvmlReader) and isinstance(nvidia_reader(smi), SmiReader)
    nvml, text = discover("cuda"), discover("cuda", run=smi)
    assert (nvml.source, text.source) == ("NVML", "nvidia-smi")
    assert nvml.devices == text.devices and len(nvml.devices) == host.count
    assert nvml.devices[0].name == host.product
    assert nvml.topology == text.topology and nvml.topology is not None
    assert nvml.topology.links and nvml.topology.cpu_affinity and nvml.topology.numa_affinity
    assert gpu_compute_capability() == gpu_compute_capability(run=smi) is not None
    for ids in (None, [0], [1, 2]):
        assert device_memory("cuda", ids) == device_memory("cuda", ids, run=smi)
    assert used_memory("cuda") == used_memory("cuda", smi) != {}
    listed = process_reader("cuda", run_tool)()
    assert listed == process_reader("cuda", smi)()
    assert any(p.pid == os.getpid() and p.device == "cuda:0" for p in listed)


def test_nvlink_pairs_are_named_as_nvidia_smi_names_them(host: Host) -> None:
    topology = discover("cuda").topology
    assert topology is not None
    links = set(topology.links.values())
    assert links == ({"NV12"} if host.count == 8 else {"PIX", "SYS"})


def test_without_the_driver_library_nvidia_smi_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "sim"
    bin_dir = install(state, Host("cuda", 2, 23028, 263, nvml=False))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SIM_DEVICES", str(state))
    monkeypatch.setitem(sys.modules, "pynvml", sim_nvml)
    assert isinstance(nvidia_reader(), SmiReader)
    found = discover("cuda")
    assert found.source == "nvidia-smi" and len(found.devices) == 2


def test_nvml_errors_are_tool_failures(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An NVML call that fails mid-read is a device tool that failed (an OSError), which every
    caller already survives: discover names it, the memory readers give up."""
    state = tmp_path / "sim"
    install(state, Host("cuda", 2, 23028, 263))
    monkeypatch.setenv("SIM_DEVICES", str(state))
    monkeypatch.setitem(sys.modules, "pynvml", sim_nvml)

    def broken(handle: int) -> None:
        raise sim_nvml.NVMLError("GPU is lost")

    monkeypatch.setattr(sim_nvml, "nvmlDeviceGetUUID", broken)
    with pytest.raises(OSError, match="GPU is lost"):
        NvmlReader(sim_nvml).gpus()
    assert sim_nvml._sessions == 0  # the session was shut down
    assert device_memory("cuda") is None and used_memory("cuda") == {}
    with pytest.raises(Exception, match="GPU is lost"):
        discover("cuda")


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py not installed")
def test_this_hosts_nvidia_ml_py_without_a_driver_falls_back_to_nvidia_smi() -> None:
    """The real nvidia-ml-py (a dependency), on a host with no NVIDIA driver library: NVML does
    not load, and GPUs would be read with nvidia-smi."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        assert isinstance(nvidia_reader(), SmiReader)
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has an NVIDIA driver: NVML loads")


def test_a_malformed_listing_still_fails_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SmiParseError):
        SmiReader(lambda argv: "0, GPU-x, A10G\n").gpus()
