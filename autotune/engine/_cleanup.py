"""What a killed engine leaves behind in shared memory, and how to remove it.

vLLM's processes share memory through POSIX segments (`/dev/shm/psm_*`, 160-250 MiB each). A
clean shutdown unlinks them; SIGKILL (a crash, the OOM killer, a teardown after a timeout)
leaves them behind, holding RAM until reboot. The launcher records the segments the engine's
own processes map (once ready, and again at teardown) and removes, after teardown, those that
no live process uses any more. Only segments seen in the engine's processes are candidates:
another engine's segment, just created and not yet mapped by its children, is never touched
(an earlier sweep by creation time deleted a starting engine's semaphore).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

logger = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
_PREFIX = "psm_"  # multiprocessing.shared_memory, as vLLM's message queues use it


def shm_used_by(pids: Iterable[int], proc: Path = Path("/proc")) -> set[Path]:
    """Shared-memory files that processes `pids` have mapped or open."""
    used: set[Path] = set()
    for pid in pids:
        used |= _shm_of(proc / str(pid))
    return used


def shm_in_use(proc: Path = Path("/proc")) -> set[Path]:
    """Shared-memory files any live process has mapped or open."""
    used: set[Path] = set()
    with suppress(OSError):
        for entry in os.scandir(proc):
            if entry.name.isdigit():
                used |= _shm_of(Path(entry.path))
    return used


def _shm_of(proc_dir: Path) -> set[Path]:
    found: set[Path] = set()
    with suppress(OSError):
        for line in (proc_dir / "maps").read_text(errors="replace").splitlines():
            fields = line.split(maxsplit=5)
            path = fields[5] if len(fields) == 6 else ""
            if path.startswith(str(SHM_DIR) + "/"):
                found.add(Path(path.removesuffix(" (deleted)")))
    with suppress(OSError):
        for fd in os.scandir(proc_dir / "fd"):
            with suppress(OSError):
                target = os.readlink(fd.path)
                if target.startswith(str(SHM_DIR) + "/"):
                    found.add(Path(target.removesuffix(" (deleted)")))
    return found


def unused_shm(shm_dir: Path = SHM_DIR, proc: Path = Path("/proc")) -> list[Path]:
    """Segments of `shm_dir` named as vLLM's (`psm_*`) that no live process maps or holds
    open: what killed engines left, unless another program's segment is caught between its
    creation and its first use (so only a report, never a removal). Another `shm_dir` is for
    tests: processes' maps are matched under /dev/shm only, so all of its segments are unused."""
    try:
        candidates = {p for p in shm_dir.iterdir() if p.name.startswith(_PREFIX)}
    except OSError:
        return []
    return sorted(candidates - shm_in_use(proc)) if candidates else []


def remove_leaked_shm(known: Iterable[Path], proc: Path = Path("/proc")) -> list[Path]:
    """Remove the segments of `known` (seen in the engine's processes) that no live process
    uses any more; returns those removed."""
    candidates = {p for p in known if p.parent == SHM_DIR and p.name.startswith(_PREFIX)}
    if not candidates:
        return []
    in_use = shm_in_use(proc)
    removed = []
    for path in sorted(candidates - in_use):
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            logger.warning("could not remove leaked shared memory %s: %s", path, exc)
    if removed:
        logger.info("removed %d shared-memory segments the engine left", len(removed))
    return removed
