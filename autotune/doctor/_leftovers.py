"""What earlier runs left: engines whose tuner is gone, shared memory no process uses."""

from __future__ import annotations

import itertools
from pathlib import Path

import psutil

from autotune.doctor._records import Check, HostInputs, size_text
from autotune.engine import engine_tuner, recorded_engine, unused_shm
from autotune.vocab import layout

# The folders an engine runs in (layout.py): trials, the confirm step's runs, profiles.
_ENGINE_FOLDERS = (
    f"*/{layout.TRIAL_PREFIX}*",
    f"*/{layout.CONFIRM_DIR}/*/*/{layout.TRIAL_PREFIX}*",
    f"*/{layout.PROFILES_DIR}/{layout.TRIAL_PREFIX}*",
)


def engines_check(root: Path, host: HostInputs) -> Check:
    """Engines recorded under `root` (`engine.pid`, the same leader test as
    `reap_stale_engine`, nothing ended) whose tuner is gone fail; vLLM servers that no live
    tuner started warn (they may be the user's own, but hold memory the trials need)."""
    left: dict[int, Path] = {}
    running = 0
    for pattern in _ENGINE_FOLDERS:
        for pid_file in sorted(root.glob(f"{pattern}/{layout.ENGINE_PID}")):
            leader = recorded_engine(pid_file.parent)
            if leader is None:
                continue
            if engine_tuner(leader.pid) is None:
                left[leader.pid] = pid_file.parent
            else:
                running += 1
    if left:
        listed = ", ".join(f"process group {pgid} ({folder})" for pgid, folder in left.items())
        fix = "end each with its whole group: " + "; ".join(f"kill -- -{g}" for g in left)
        return Check("engines", "fail", f"left by an earlier tuner: {listed}", fix)
    strays = [pid for pid in vllm_servers(host) if engine_tuner(pid) is None]
    if strays:
        listed = ", ".join(f"pid {pid}" for pid in strays[:5])
        why = f"vLLM servers that no running tuner started: {listed}"
        return Check("engines", "warn", why, "stop them unless they are yours")
    others = f"; {running} of running tuners" if running else ""
    return Check("engines", "ok", f"none left behind{others}")


def vllm_servers(host: HostInputs) -> list[int]:
    """Pids of the processes that run a vLLM server (`vllm serve`, `-m vllm.entrypoints...`)."""
    found = []
    for proc in host.processes():
        try:
            argv = proc.cmdline()
        except psutil.Error:
            continue
        module = any(
            a == "-m" and b.startswith("vllm.entrypoints") for a, b in itertools.pairwise(argv)
        )
        serve = len(argv) > 1 and Path(argv[0]).name == "vllm" and argv[1] == "serve"
        if module or serve:
            found.append(proc.pid)
    return found


def shm_check(host: HostInputs) -> Check:
    """Segments of vLLM's kind that no live process maps: a warning, since another program's
    segment can be caught between its creation and its first use."""
    proc = host.root / "proc"
    leaked = unused_shm(proc=proc) if host.shm_dir is None else unused_shm(host.shm_dir, proc)
    if not leaked:
        return Check("shm", "ok", "no unused vLLM shared-memory segment")
    total = sum(_bytes(p) for p in leaked)
    listed = " ".join(str(p) for p in leaked[:5]) + (" …" if len(leaked) > 5 else "")
    why = f"{len(leaked)} segments ({size_text(total)}) that no process uses: {listed}"
    return Check("shm", "warn", why, "rm those no program of yours still needs (killed engines')")


def _bytes(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
