"""A simulated multi-device host: `npu-smi` and `nvidia-smi` stand-ins whose memory follows the
fake engines that run on them.

State lives in one folder (`SIM_DEVICES` names it): `host.json` (the devices, the memory other
jobs hold, the release delay) and `engines/PID.json`, one per fake engine that allocated. A fake
engine (tests/fake_engine.py, with `SIM_DEVICES` set) calls `allocate` at start-up: on each
device it uses (the first `tensor_parallel_size` of `ASCEND_RT_VISIBLE_DEVICES` /
`CUDA_VISIBLE_DEVICES`, all devices when unset) it takes `gpu_memory_utilization` of the total,
as vLLM does, or fails with vLLM's own message when that much is not free. When it exits it
calls `release`: the memory stays held, and the process listed, for `release_delay_s` more, as a
driver tearing a context down. An engine killed without a word is noticed dead on the next read,
and released after the same delay.

The stand-ins print the recorded formats (tests/fixtures/smi): the plain `npu-smi info` table of
a 910B3 host, `npu-smi info -t topo`, and nvidia-smi's CSV queries and `topo -m`:

    python tests/sim_devices.py npu-smi info
    python tests/sim_devices.py nvidia-smi --query-gpu=index,uuid,... --format=csv,noheader,nounits

`install(folder, host)` writes the state and the two executables (only the host's tool: an
Ascend host has no nvidia-smi), to be put first on PATH. Standard library only.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

SMI_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "smi"
MIB = 2**20
_NAMES = {"ascend": "910B3", "cuda": "NVIDIA A10G"}
FREE_MEMORY_ERROR = (
    "ValueError: Free memory on device ({free:.2f}/{total:.2f} GiB) on startup is less than "
    "desired GPU memory utilization ({util}, {want:.2f} GiB). Decrease GPU memory utilization or "
    "reduce GPU memory used by other processes."
)  # vLLM's own (tests/fixtures/engine_logs/cuda-free-memory.log)


@dataclass
class Host:
    """The simulated devices: `platform` ascend (910B3, 64 GB) or cuda (A10G, 23 GB), or any
    other product by `name`, `total_mib` and `compute_cap` (benchmarks/sim/cli.py: the
    simulated landscapes' H100 and 8x A100 hosts)."""

    platform: str
    count: int
    total_mib: int
    idle_mib: int  # what an idle device reports in use
    busy: dict[int, int] = field(default_factory=dict)  # device -> MiB another job holds
    release_delay_s: float = 1.5
    foreign_pid: int = 4242  # the other job's process, as the tools list it
    name: str = ""  # the device's product name; the platform's default when empty
    compute_cap: str = "8.6"  # what `nvidia-smi --query-gpu=compute_cap` prints (an A10G)
    # Added to the engines' pids as the tools list them: the tuner in a container that does not
    # share the host's pid namespace, whose tools list host pids (0: the same namespace).
    pid_offset: int = 0
    nvml: bool = True  # whether NVML loads (tests/sim_nvml.py); False: nvidia-smi only

    @property
    def product(self) -> str:
        return self.name or _NAMES[self.platform]

    @classmethod
    def ascend_910b3(cls, busy: dict[int, int], **kw: float) -> Host:
        return cls("ascend", 8, 65536, 3408, busy, **kw)  # type: ignore[arg-type]

    @classmethod
    def cuda_a10g(cls, busy: dict[int, int], **kw: float) -> Host:
        return cls("cuda", 4, 23028, 263, busy, **kw)  # type: ignore[arg-type]


def install(folder: Path, host: Host) -> Path:
    """Write the state under `folder` and the host's tool in `folder/bin`; returns bin."""
    (folder / "engines").mkdir(parents=True, exist_ok=True)
    (folder / "host.json").write_text(json.dumps(asdict(host)))
    tool = "npu-smi" if host.platform == "ascend" else "nvidia-smi"
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / tool
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__)}" {tool} "$@"\n')
    script.chmod(0o755)
    return bin_dir


def load_host(state: Path) -> Host:
    data = json.loads((state / "host.json").read_text())
    data["busy"] = {int(k): v for k, v in data["busy"].items()}
    return Host(**data)


@contextmanager
def _locked(state: Path) -> Iterator[None]:
    with open(state / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def engines(state: Path) -> list[dict]:
    """Every engine that allocated, live or not: pid, devices, tp, visible (the variable as the
    engine saw it), mib, alloc_t, free_t."""
    return [json.loads(p.read_text()) for p in sorted((state / "engines").glob("*.json"))]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) holds nothing
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _holding(state: Path, host: Host, now: float) -> list[dict]:
    """The engines holding memory at `now`; one found dead is released (after the delay)."""
    held = []
    for engine in engines(state):
        if engine["free_t"] is None and not _alive(engine["pid"]):
            engine["free_t"] = now + host.release_delay_s
            _write(state, engine)
        if engine["free_t"] is None or engine["free_t"] > now:
            held.append(engine)
    return held


def _write(state: Path, engine: dict) -> None:
    path = state / "engines" / f"{engine['pid']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(engine))
    tmp.replace(path)


def usage(state: Path, now: float | None = None) -> tuple[Host, dict[int, int], list[tuple]]:
    """(host, used MiB per device, processes as (device, pid, MiB)) at `now`."""
    host = load_host(state)
    now = time.time() if now is None else now
    used = {d: host.idle_mib + host.busy.get(d, 0) for d in range(host.count)}
    processes = [(d, host.foreign_pid, mib) for d, mib in sorted(host.busy.items())]
    for engine in _holding(state, host, now):
        for d in engine["devices"]:
            used[d] += engine["mib"]
            processes.append((d, engine["pid"] + host.pid_offset, engine["mib"]))
    return host, used, sorted(processes)


def allocate(state: Path, env: dict[str, str], tp: int, util: float) -> str | None:
    """Take `util` of each device's memory for this process; vLLM's error when it is not free."""
    with _locked(state):
        host, used, _ = usage(state)
        var = "ASCEND_RT_VISIBLE_DEVICES" if host.platform == "ascend" else "CUDA_VISIBLE_DEVICES"
        visible = [int(v) for v in env.get(var, "").split(",") if v.strip()]
        devices = (visible or list(range(host.count)))[:tp]
        want = int(util * host.total_mib)
        for d in devices:
            free = host.total_mib - used[d]
            if free < want:
                gib = 1024.0
                return FREE_MEMORY_ERROR.format(
                    free=free / gib, total=host.total_mib / gib, util=util, want=want / gib
                )
        engine = {"pid": os.getpid(), "devices": devices, "tp": tp, "visible": env.get(var),
                  "mib": want - host.idle_mib, "alloc_t": time.time(), "free_t": None}  # fmt: skip
        _write(state, engine)
    print(f"visible: {len(visible or range(host.count))} device(s); " + ", ".join(
        f"cuda:{k} is {host.product} {_uuid(d)}" for k, d in enumerate(devices)
    ) + " (simulated)", file=sys.stderr, flush=True)  # fmt: skip
    return None


def release(state: Path) -> None:
    """This process's memory is freed `release_delay_s` from now."""
    with _locked(state):
        path = state / "engines" / f"{os.getpid()}.json"
        if path.exists():
            engine = json.loads(path.read_text())
            engine["free_t"] = time.time() + load_host(state).release_delay_s
            _write(state, engine)


# -- the tools' output -------------------------------------------------------------------------

_NPU_HEAD = SMI_FIXTURES / "npu_smi_910b3_x8_one_process.txt"
_BORDER = "+===========================+===============+====================================================+"  # noqa: E501


def npu_smi_info(state: Path) -> str:
    """The plain `npu-smi info` table, laid out as the recorded 910B3 one."""
    host, used, processes = usage(state)
    lines = _NPU_HEAD.read_text().splitlines()[:6]
    for d in range(host.count):
        third = f" {'95.0':<12}{'35':<18}{'0    / 0':<21}"
        lines.append(f"|{f' {d:<6}910B3':<27}|{' OK':<15}|{third:<52}|")
        hbm = f"{used[d]:<5}/ {host.total_mib}"
        third = f" {'0':<12}{'0    / 0':<18}{hbm}"
        lines.append(f"|{' 0':<27}|{f' 0000:{0xC1 + d:02X}:00.0':<15}|{third:<52}|")
        lines.append(_BORDER)
    lines += [
        "+---------------------------+---------------+----------------------------------------------------+",
        "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |",  # noqa: E501
        _BORDER,
    ]
    for d in range(host.count):
        rows = [p for p in processes if p[0] == d]
        if not rows:
            lines.append(f"|{f' No running processes found in NPU {d}':<96}|")
        for _, pid, mib in rows:
            lines.append(f"|{f' {d:<8}0':<27}|{f' {pid}':<15}|{' python':<26}|{f' {mib}':<25}|")
        lines.append(_BORDER)
    return "\n".join(lines) + "\n"


def _uuid(d: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{d:012d}"


def nvidia_smi(state: Path, args: list[str]) -> str:
    """The CSV queries the tuner runs, and `topo -m`, in nvidia-smi's recorded formats."""
    host, used, processes = usage(state)
    if args[:1] == ["topo"]:
        if host.count == 4:
            return (SMI_FIXTURES / "nvidia_smi_topo_sim_x4.txt").read_text()
        return _nvlink_topo(host.count)
    query = next((a for a in args if a.startswith("--query")), "")
    if query == "--query-gpu=compute_cap":
        return f"{host.compute_cap}\n" * host.count
    if query.startswith("--query-gpu="):
        return "".join(
            f"{d}, {_uuid(d)}, {host.product}, {host.total_mib}, {used[d]}, "
            f"{host.total_mib - used[d]}\n"
            for d in range(host.count)
        )
    if query.startswith("--query-compute-apps="):
        return "".join(f"{_uuid(d)}, {pid}, {mib}\n" for d, pid, mib in processes)
    raise SystemExit(f"simulated nvidia-smi: unsupported arguments {args}")


def _nvlink_topo(count: int) -> str:
    """`nvidia-smi topo -m` of an NVSwitch host (every pair NV12, as an 8x A100 SXM DGX prints
    it), one NUMA node per half."""
    names = [f"GPU{d}" for d in range(count)]
    lines = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    half = max(1, count // 2)
    for d in range(count):
        links = ["\t X " if e == d else "\tNV12" for e in range(count)]
        node = d // half
        lines.append(f"GPU{d}" + "".join(links) + f"\t{node * 24}-{node * 24 + 23}\t{node}\t\tN/A")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    state = Path(os.environ["SIM_DEVICES"])
    tool, args = argv[0], argv[1:]
    if tool == "npu-smi" and args == ["info"]:
        sys.stdout.write(npu_smi_info(state))
    elif tool == "npu-smi" and args == ["info", "-t", "topo"]:
        sys.stdout.write((SMI_FIXTURES / "npu_smi_topo_910b3_x8.txt").read_text())
    elif tool == "nvidia-smi":
        sys.stdout.write(nvidia_smi(state, args))
    else:
        raise SystemExit(f"simulated {tool}: unsupported arguments {args}")


if __name__ == "__main__":
    main(sys.argv[1:])
