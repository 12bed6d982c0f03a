"""Devices held across the processes of one host: two tuners (or `confirm` beside `tune`) never
run engines on the same cores or accelerators at once.

`DevicePool` hands disjoint devices to the trials of one process; this module extends the
promise to every autotune process on the host with one lock file per device (per core on CPU)
under `lock_dir()`, held with `flock` for as long as the lease: the kernel drops it when the
holder dies, so a killed tuner leaves no stale lock. A holder writes its pid and what it runs
into its files, for the waiting one's message.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from autotune.devices._inventory import Device
from autotune.devices._numa import parse_cpulist

logger = logging.getLogger(__name__)
LOCK_DIR_ENV = "AUTOTUNE_LOCK_DIR"  # where the lock files are (tests: a folder of their own)
POLL_S = 0.5  # how often a waiting run looks again


def owner() -> str:
    """What this process is, for another's waiting message: `autotune tune --study x ...`."""
    return "autotune " + " ".join(sys.argv[1:])[:160]


def lock_dir() -> Path:
    """`$AUTOTUNE_LOCK_DIR`, else `autotune-locks` in the system's temporary folder."""
    configured = os.environ.get(LOCK_DIR_ENV)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "autotune-locks"


def device_keys(platform: str, devices: Iterable[Device]) -> list[str]:
    """The lock keys of `devices`: each core of a CPU device, else each accelerator's id."""
    keys: list[str] = []
    for d in devices:
        if platform == "cpu" and d.cores:
            keys += [f"cpu-core-{c}" for c in parse_cpulist(d.cores)]
        else:
            keys.append(f"{platform}-{d.id}")
    return keys


class HostHold:
    """Device locks held by this process; `release()` gives them back (closing the files
    drops the locks)."""

    def __init__(self, files: list[int]) -> None:
        self._files = files

    def __del__(self) -> None:  # a lease dropped unreleased holds nothing past its owner
        self.release()

    def release(self) -> None:
        files, self._files = self._files, []
        for fd in files:
            with contextlib.suppress(OSError):
                os.close(fd)


def try_hold(keys: Iterable[str], what: str = "") -> HostHold | str:
    """Hold every key of `keys` without waiting. Returns the hold, or, where another process
    (or another lease of this one) holds a key, a line saying who (`pid 123: autotune tune
    ...`), and nothing is held."""
    folder = _shared_folder()
    if folder is None:
        return HostHold([])
    taken: list[int] = []
    for key in sorted(set(keys)):
        path = folder / f"{key}.lock"
        try:
            fd = _open(path)
        except OSError as exc:
            _unusable(folder, exc)
            HostHold(taken).release()
            return HostHold([])
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            os.close(fd)
            HostHold(taken).release()
            return holder or f"another process ({key})"
        with contextlib.suppress(OSError):  # a file of another user's: locked, not written
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: {what}".encode(), 0)
        taken.append(fd)
    return HostHold(taken)


def _shared_folder() -> Path | None:
    """The lock folder, made writable for every user of the host (as /tmp is: sticky), or
    None where it cannot be had (then leases hold within this process only, said once)."""
    folder = lock_dir()
    try:
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                folder.chmod(0o1777)
    except OSError as exc:
        _unusable(folder, exc)
        return None
    return folder


def _open(path: Path) -> int:
    """A descriptor to lock `path` by, made readable and writable by every user; another
    user's file opens read-only (flock needs no more)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd


_SAID: set[str] = set()


def _unusable(folder: Path, exc: OSError) -> None:
    if str(folder) not in _SAID:
        _SAID.add(str(folder))
        logger.warning(
            "device locks in %s cannot be used (%s): other autotune processes on this host "
            "may run engines beside this one's; set %s to a writable folder",
            folder,
            exc.strerror or exc,
            LOCK_DIR_ENV,
        )


def hold_host(cancel: threading.Event | None = None) -> HostHold:
    """Every core this process may run on, held (waiting for them): a run with no device pool
    has the host as a whole."""
    keys = [f"cpu-core-{c}" for c in sorted(os.sched_getaffinity(0))]
    return wait_hold(keys, owner(), cancel)


def wait_hold(keys: Iterable[str], what: str, cancel: threading.Event | None = None) -> HostHold:
    """Hold `keys`, waiting (and saying so, once per holder) while another process holds
    one; KeyboardInterrupt where `cancel` is set meanwhile."""
    keys = list(keys)
    said = ""
    while True:
        held = try_hold(keys, what)
        if not isinstance(held, str):
            return held
        if held != said:
            logger.warning("waiting for devices another process on this host holds (%s)", held)
            said = held
        if cancel is not None and cancel.wait(POLL_S):
            raise KeyboardInterrupt
        if cancel is None:
            time.sleep(POLL_S)


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
