"""Leases hold across the processes of one host (autotune.devices._hostlock): two tuners, or
`confirm` beside `tune`, never run engines on the same cores or accelerators at once (issue
32: both printed "1 at a time on cores 0-1" and their trials overlapped)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.devices import DevicePool, Inventory
from autotune.devices._hostlock import device_keys, lock_dir, try_hold
from autotune.devices._inventory import Device


def cpu_pool() -> DevicePool:
    """Two core slots of one host, as `split_cpu` makes them."""
    devices = [
        Device(0, "cores 0-1", None, None, "cpu", cores="0-1"),
        Device(1, "cores 2-3", None, None, "cpu", cores="2-3"),
    ]
    return DevicePool(Inventory("cpu", devices))


def test_a_second_pool_on_the_host_takes_the_other_slot_then_waits() -> None:
    first, second = cpu_pool(), cpu_pool()  # two tuners, as far as the host can tell
    held = first.acquire(1)
    assert held.ids == [0]
    other = second.acquire(1, timeout=60)  # free: taken at once
    assert other.ids == [1]  # not cores 0-1 again
    with pytest.raises(TimeoutError):
        second.acquire(1, timeout=0.6)
    held.release()
    assert second.acquire(1, timeout=60).ids == [0]


def test_a_lease_of_a_process_that_died_holds_nothing(caplog: pytest.LogCaptureFixture) -> None:
    # Another process holds cores 0-3 (both slots), saying who it is; when it is killed the
    # kernel drops its locks: no stale lock file keeps the host.
    keys = device_keys("cpu", cpu_pool().devices)
    assert keys == [f"cpu-core-{c}" for c in range(4)]
    code = (
        "import sys, time; from autotune.devices._hostlock import try_hold; "
        f"h = try_hold({keys!r}, what='autotune tune --study other'); "
        "print('held', flush=True); time.sleep(60)"
    )
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        pool = cpu_pool()
        with caplog.at_level(logging.WARNING), pytest.raises(TimeoutError):
            pool.acquire(1, timeout=0.8)
        assert f"pid {other.pid}: autotune tune --study other" in caplog.text
    finally:
        other.kill()
        other.wait()
    started = time.monotonic()
    assert pool.acquire(2, timeout=60).ids == [0, 1]
    assert time.monotonic() - started < 30  # a dead holder's lock is free: no waiting it out


def test_the_suite_keeps_its_locks_to_itself(host_lock_dir: Path) -> None:
    assert lock_dir() == host_lock_dir
    hold = try_hold(["cuda-3"], what="test")
    assert not isinstance(hold, str)
    assert (host_lock_dir / "cuda-3.lock").read_text().endswith(": test")
    assert isinstance(try_hold(["cuda-3"]), str)  # held, even within one process
    hold.release()
    again = try_hold(["cuda-3"])
    assert not isinstance(again, str)
    again.release()


def test_an_unusable_lock_folder_is_said_once_and_leases_still_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("AUTOTUNE_LOCK_DIR", str(blocker / "locks"))  # under a file: no folder
    with caplog.at_level(logging.WARNING):
        assert cpu_pool().acquire(2, timeout=60).ids == [0, 1]
        assert cpu_pool().acquire(1, timeout=60).ids == [0]  # held in no other process's eyes
    said = [r.getMessage() for r in caplog.records if "cannot be used" in r.getMessage()]
    assert len(said) == 1 and "set AUTOTUNE_LOCK_DIR to a writable folder" in said[0]
