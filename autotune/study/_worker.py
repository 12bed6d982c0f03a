"""Who runs a trial, and whether that worker is gone.

Every trial records its worker (`keys.WORKER`): host, process id and start time, the run's
token and the devices it was given. Another worker uses this to tell a dead worker's trial
from a live one: on the same host a process that is gone (or whose id now belongs to another
process, or a run of this process that has ended) is dead at once; on another host, the trial's
heartbeat (`StudyStore.heartbeat`, in database time) says so after `stale_after_s`. The host
is the harness's (`AUTOTUNE_WORKER_HOST` or the host name, resolved by the CLI).
"""

from __future__ import annotations

import os
import threading
import uuid

import psutil

from autotune.store import Worker

_live_runs: set[str] = set()
_lock = threading.Lock()


def new_run() -> str:
    """A token for one runner in this process, live until `end_run`."""
    token = uuid.uuid4().hex[:12]
    with _lock:
        _live_runs.add(token)
    return token


def end_run(token: str) -> None:
    with _lock:
        _live_runs.discard(token)


def worker_attr(run: str, host: str, devices: str | None = None, lane: int = 0) -> Worker:
    """The record of this worker on `host`: what `is_dead_here` reads back."""
    pid = os.getpid()
    return Worker(host=host, pid=pid, started=_started(pid), run=run, lane=lane, devices=devices)


def is_here(worker: Worker, host: str) -> bool:
    """Whether the worker ran on `host` (its trial folder and engine are there)."""
    return worker.host == host


def is_dead_here(worker: Worker, host: str) -> bool:
    """Whether the worker ran on `host`, this one, and is gone."""
    if not is_here(worker, host):
        return False
    if worker.pid is None:
        return True
    if worker.pid == os.getpid():
        with _lock:
            return worker.run not in _live_runs
    started = _started(worker.pid)
    return started is None or started != worker.started


def _started(pid: int) -> float | None:
    try:
        return round(psutil.Process(pid).create_time(), 2)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
