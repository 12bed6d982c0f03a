"""The tuner's CUDA device path on a real GPU, without vLLM: `bash scripts/gpu-check.sh [OUT]`.

An engine stand-in (tests/fake_engine.py with FAKE_ENGINE_TORCH=1: vLLM's server surface, its
memory held with torch as vLLM's workers hold `gpu_memory_utilization` of each device) is run
by the tuner's own launcher on a device leased from the tuner's own pool. Checked:

1. the GPUs are listed as the tuner lists them (NVML where nvidia-ml-py loads, else nvidia-smi);
   where NVML loads, it and nvidia-smi agree on devices, links and compute capability; the raw
   output of the nvidia-smi queries the tuner runs is kept as fixtures;
2. the engine sees only its lease (`CUDA_VISIBLE_DEVICES`): one device, the leased GPU's UUID;
3. while it runs, nvidia-smi lists its process on that GPU, and the memory estimate's reading
   of the leased device shows the memory held;
4. teardown waits until the memory is released: right after it, the device is free again;
5. a config that does not fit fails with torch's real `OutOfMemoryError`, classified `oom`;
6. after the OOM, the device is free again for the next lease.

Findings go to OUT/findings.json (one entry per check, with its numbers), the tools' raw output
to OUT/smi/, the engines' folders to OUT/engines/. Exit 0 when every check passed, 1 when one
failed, 2 when this host cannot run the check (no nvidia-smi, no CUDA torch). With SIM_DEVICES
set, the same runs on the simulated host of tests/sim_devices.py (the tests do so).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
STAND_IN = REPO / "tests" / "fake_engine.py"
GIB = 2**30
_VISIBLE = re.compile(r"visible: (\d+) device\(s\); cuda:0 is .* (GPU-[0-9a-fA-F-]+)")


class Check:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.results: list[dict[str, Any]] = []

    def record(self, name: str, ok: bool, **detail: Any) -> bool:
        self.results.append({"check": name, "ok": bool(ok), **detail})
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {json.dumps(detail, default=str)}", flush=True)
        return bool(ok)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, nargs="?", default=Path("gpu-check"))
    parser.add_argument("--startup-timeout-s", type=float, default=240.0)
    args = parser.parse_args(argv)
    try:  # the tuner's own modules, and their dependencies
        from autotune.devices import discover
    except ImportError as err:
        print(f"gpu-check: cannot import the tuner ({err}): pip install -e . first", flush=True)
        return 2
    from autotune.devices import DeviceError

    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out)
    started = time.monotonic()
    try:
        inventory = discover("cuda")
    except DeviceError as err:
        print(f"gpu-check: not a GPU host here: {err}", flush=True)
        return 2
    try:
        _run(check, inventory, args)
    finally:
        findings = {"elapsed_s": round(time.monotonic() - started, 1), "checks": check.results}
        (args.out / "findings.json").write_text(json.dumps(findings, indent=2, default=str))
    failed = [r["check"] for r in check.results if not r["ok"]]
    passed = len(check.results) - len(failed)
    which = f"; failed: {', '.join(failed)}" if failed else ""
    print(f"gpu-check: {passed} of {len(check.results)} checks passed{which}; in {args.out}")
    return 1 if failed else 0


def _run(check: Check, inventory: Any, args: argparse.Namespace) -> None:
    from autotune.devices import device_memory, plan_lanes
    from autotune.engine import LaunchSettings

    _keep_tool_output(args.out / "smi")
    gpus = [
        {"id": d.id, "name": d.name, "total_gib": (d.total_bytes or 0) / GIB,
         "used_gib": (d.used_bytes or 0) / GIB, "numa": d.numa_node}
        for d in inventory.devices
    ]  # fmt: skip
    check.record("GPUs listed", bool(gpus), gpus=gpus, topology=bool(inventory.topology),
                 source=inventory.source)  # fmt: skip
    _readers_agree(check)
    pool, _ = plan_lanes("cuda", "auto", busy_share=0.1)  # a GPU another job holds is left out
    assert pool is not None
    settings = LaunchSettings(
        command=f"{sys.executable} {STAND_IN}",
        platform="cuda",
        startup_timeout_s=args.startup_timeout_s,
        release_timeout_s=60.0,
    )
    os.environ["FAKE_ENGINE_TORCH"] = "1"
    os.environ.setdefault("FAKE_ENGINE_STARTUP_S", "0.1")
    with pool.acquire(1) as lease:
        before = device_memory("cuda", lease.ids)
        if before is None:
            check.record("device memory read", False, device=lease.ids)
            return
        _holds(check, lease, before, settings, args.out / "engines" / "holds")
    with pool.acquire(1) as lease:
        _too_big(check, lease, before.available_bytes, settings, args.out / "engines" / "oom")


def _readers_agree(check: Check) -> None:
    """Where NVML loads (nvidia-ml-py installed), it and nvidia-smi list the same GPUs and
    links, and the same compute capability; without it the tuner reads nvidia-smi alone."""
    from autotune.devices import discover, gpu_compute_capability, nvidia_reader, run_tool

    if nvidia_reader().source != "NVML":
        print("gpu-check: NVML does not load here (nvidia-ml-py?): GPUs read with nvidia-smi")
        return
    smi = lambda argv: run_tool(argv)  # noqa: E731 (not run_tool itself: that one gets NVML)
    nvml, text = discover("cuda"), discover("cuda", run=smi)
    same = [(d.id, d.name, d.total_bytes) for d in nvml.devices] == [
        (d.id, d.name, d.total_bytes) for d in text.devices
    ]
    links = (nvml.topology.links if nvml.topology else None,
             text.topology.links if text.topology else None)  # fmt: skip
    caps = (gpu_compute_capability(), gpu_compute_capability(run=smi))
    ok = same and links[0] == links[1] and caps[0] == caps[1]
    shown = {"-".join(map(str, pair)): kind for pair, kind in (links[0] or {}).items()}
    check.record("NVML and nvidia-smi agree", ok, devices=same, links_same=links[0] == links[1],
                 links=shown, caps=caps)  # fmt: skip


def _keep_tool_output(folder: Path) -> None:
    """The raw output of every nvidia-smi query the tuner runs, to keep as fixtures."""
    from autotune.devices import (
        NVIDIA_APPS_QUERY,
        NVIDIA_COMPUTE_CAP_QUERY,
        NVIDIA_GPU_QUERY,
        NVIDIA_TOPO,
        run_tool,
    )

    folder.mkdir(parents=True, exist_ok=True)
    queries = {"query_gpu": NVIDIA_GPU_QUERY, "compute_apps": NVIDIA_APPS_QUERY,
               "compute_cap": NVIDIA_COMPUTE_CAP_QUERY, "topo": NVIDIA_TOPO}  # fmt: skip
    for name, argv in queries.items():
        try:
            (folder / f"{name}.txt").write_text(run_tool(list(argv)))
        except (OSError, subprocess.SubprocessError) as err:
            (folder / f"{name}.error.txt").write_text(str(err))


def _holds(check: Check, lease: Any, before: Any, settings: Any, folder: Path) -> None:
    """Checks 2-4: one engine holding half its leased GPU, then its teardown."""
    from autotune.devices import device_memory, process_reader, run_tool
    from autotune.engine import EngineConfig, launch

    (gpu,) = lease.ids
    uuid = _uuids(run_tool).get(gpu, "")
    config = EngineConfig(
        model="stand-in", args={"gpu_memory_utilization": 0.5}, env=dict(lease.env)
    )
    with launch(config, settings, folder) as engine:
        seen = _VISIBLE.search(engine.log_path.read_text(errors="replace"))
        honoured = bool(seen) and seen[1] == "1" and seen[2].lower() == uuid.lower()
        saw = seen.group(0) if seen else None
        check.record("CUDA_VISIBLE_DEVICES honoured", honoured, leased=gpu, uuid=uuid, saw=saw)
        listed = [p for p in process_reader("cuda", run_tool)() if p.device == f"cuda:{gpu}"]
        pids = {p.pid for p in engine.spawned.tree()}
        during = device_memory("cuda", [gpu])
        held = before.available_bytes - (during.available_bytes if during else 0)
        check.record(
            "the engine's memory is seen on its device",
            held > 0.4 * before.total_bytes,
            held_gib=held / GIB,
            listed=[(p.pid, p.used_bytes) for p in listed],
            engine_listed=any(p.is_one_of(pids) for p in listed),
        )
        stopping = time.monotonic()
    after = device_memory("cuda", [gpu])
    back = after.available_bytes if after else 0
    check.record(
        "released before the next lease",
        back > before.available_bytes - GIB,
        teardown_s=round(time.monotonic() - stopping, 2),
        free_before_gib=before.available_bytes / GIB,
        free_after_gib=back / GIB,
    )


def _too_big(check: Check, lease: Any, free_before: int, settings: Any, folder: Path) -> None:
    """Checks 5-6: a config that cannot fit fails as an oom, and leaves the GPU free."""
    from autotune.devices import device_memory
    from autotune.engine import EngineConfig, EngineError, launch

    config = EngineConfig(
        model="stand-in", args={"gpu_memory_utilization": 1.5}, env=dict(lease.env)
    )
    failure = None
    try:
        with launch(config, settings, folder):
            pass
    except EngineError as err:
        failure = err.failure
    kind = failure.kind if failure else None
    reason = failure.reason if failure else None
    check.record("a config that does not fit is an oom", kind == "oom", kind=kind, reason=reason)
    free = device_memory("cuda", lease.ids)
    free_gib = free.available_bytes / GIB if free else None
    ok = free is not None and free.available_bytes > free_before - GIB
    check.record("free again after the oom", ok, free_gib=free_gib)


def _uuids(run: Any) -> dict[int, str]:
    from autotune.devices import NVIDIA_GPU_QUERY, parse_nvidia_gpus

    return {g.index: g.uuid for g in parse_nvidia_gpus(run(list(NVIDIA_GPU_QUERY)))}


if __name__ == "__main__":
    sys.exit(main())
