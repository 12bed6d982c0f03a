"""Devices held across the processes of one host: two tuners (or `confirm` beside `tune`) never
run engines on the same cores or accelerators at once.

`DevicePool` hands disjoint devices to the trials of one process; this module extends the
promise to every autotune process on the host with one lock file per device (per core on CPU)
under `lock_dir()`, held with `flock` for as long as the lease: the kernel drops it when the
holder dies, so a killed tuner leaves no stale lock. A holder writes its pid and what it runs
into its own files, for the waiting one's message.

The folder is shared by every user of the host (issue 45: it must not be a way into another
user's files, root's above all). So the folder is opened once per hold without following a
symbolic link and each file by name within it, never following one either; a file is made
with O_EXCL (and only a file just made is opened to every user, mode 0666); an existing one
must be a regular file of one link, and is written only when it is this user's. The folder's
owner may be another user (the first tuner of the host made it, mode 1777 as /tmp is): what
its owner can do (remove a lock file) breaks a lease, never redirects a write, and refusing it
would end the coordination between users that the folder is for unless root made it. A folder
every user may write in without the sticky bit is refused: any user could swap its files. A folder
or file refused, as one that cannot be opened, is said once, naming `AUTOTUNE_LOCK_DIR`, and
leases then hold within this process only: a tuner goes on rather than wait on a file that a
user can plant.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from autotune.devices._inventory import Device
from autotune.devices._numa import parse_cpulist
from autotune.vocab.platform import Platform

logger = logging.getLogger(__name__)
LOCK_DIR_ENV = "AUTOTUNE_LOCK_DIR"  # where the lock files are (tests: a folder of their own)
POLL_S = 0.5  # how often a waiting run looks again
HOLDER_BYTES = 240  # the most of a holder's line that is read (`owner()` is under 200)
# Never a symbolic link, never a controlling terminal; kept from engines this process starts.
_OPEN = os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


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
        if platform == Platform.CPU and d.cores:
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


class UnsafeLock(OSError):
    """A lock folder or file that could redirect this process's writes, or let any user
    break its leases: a symbolic link, a hard link, not a regular file or folder."""


def try_hold(keys: Iterable[str], what: str = "") -> HostHold | str:
    """Hold every key of `keys` without waiting. Returns the hold, or, where another process
    (or another lease of this one) holds a key, a line saying who (`pid 123: autotune tune
    ...`), and nothing is held."""
    folder = lock_dir()
    try:
        folder_fd = _open_folder(folder)
    except OSError as exc:
        _unusable(folder, exc)
        return HostHold([])
    try:
        return _hold_in(folder, folder_fd, sorted(set(keys)), what)
    finally:
        os.close(folder_fd)


def _hold_in(folder: Path, folder_fd: int, keys: list[str], what: str) -> HostHold | str:
    taken: list[int] = []
    for key in keys:
        try:
            fd, mine = _open_lock(folder_fd, f"{key}.lock")
        except OSError as exc:
            _unusable(folder, exc)
            HostHold(taken).release()
            return HostHold([])
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            HostHold(taken).release()
            return holder or f"another process ({key})"
        if mine:  # another user's file is locked, never written
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()}: {what}".encode(), 0)
        taken.append(fd)
    return HostHold(taken)


def _open_folder(folder: Path) -> int:
    """A descriptor of the lock folder (made, for every user as /tmp is, where there is none).
    Raises OSError where it is a symbolic link, not a folder, or writable by every user without
    the sticky bit (a group's write is left to the group: umask 002 makes folders so)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(folder, 0o700)  # opened to every user below, once it is known to be this one
        made = True
    except FileExistsError:
        made = False
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _OPEN)
    except OSError:
        if folder.is_symlink():  # O_DIRECTORY's ENOTDIR, O_NOFOLLOW's ELOOP
            raise UnsafeLock("it is a symbolic link") from None
        raise
    try:
        info = os.fstat(fd)
        if made and info.st_uid == os.geteuid():
            os.fchmod(fd, 0o1777)
            info = os.fstat(fd)
        if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
            raise UnsafeLock("every user may write in it and it has no sticky bit")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_lock(folder_fd: int, name: str) -> tuple[int, bool]:
    """A descriptor to lock `name` (in the folder of `folder_fd`) by, and whether this user
    owns the file (then its holder line may be written). A new file is opened to every user;
    another user's opens read-only where it must."""
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN, 0o600, dir_fd=folder_fd)
    except FileExistsError:
        pass
    else:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # made just now by this process: every user's tuner locks it
        return fd, True
    try:
        try:  # O_NONBLOCK: a FIFO planted under the name must not hold the open
            fd = os.open(name, os.O_RDWR | os.O_NONBLOCK | _OPEN, dir_fd=folder_fd)
        except PermissionError:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _OPEN, dir_fd=folder_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met one
            raise UnsafeLock(f"{name} is a symbolic link") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        links = f"one of {info.st_nlink} links to a file"
        raise UnsafeLock(
            f"{name} is {links if stat.S_ISREG(info.st_mode) else 'not a regular file'}"
        )
    return fd, info.st_uid == os.geteuid()


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


def _holder(fd: int) -> str:
    """Who holds the lock file `fd`: its line where the holder wrote it, else the holder's pid
    as /proc/locks names it ("" where neither is known). The line is read bounded and shown
    without control characters (anyone may write a file of mode 0666)."""
    try:
        text = os.pread(fd, HOLDER_BYTES, 0).decode(errors="replace")
        pid = _lock_pid(os.fstat(fd))
    except OSError:
        return ""
    line = "".join(c if c.isprintable() else "?" for c in text.strip())
    if pid is None or line.startswith(f"pid {pid}:"):
        return line
    return f"pid {pid}"  # a holder that could not write the file (another user's): not its line


def _lock_pid(info: os.stat_result) -> int | None:
    """The pid of the flock held on the file of `info`, from /proc/locks (Linux; None where it
    cannot be read or names none)."""
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks") as f:
            for line in f:  # `1: FLOCK  ADVISORY  WRITE 7154 fe:00:2146545 0 EOF`
                parts = line.split()
                if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == inode:
                    return int(parts[4]) or None
    except (OSError, ValueError):
        return None
    return None
