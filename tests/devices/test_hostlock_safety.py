"""The host-wide lock folder is shared by every user of the host (issue 45): a file planted in
it (a symbolic or hard link to a file root owns, a FIFO) or a folder anyone may swap files in
never redirects a hold's writes; each is said once, naming AUTOTUNE_LOCK_DIR, and the hold
then holds within the process only. The normal case still locks across processes."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from autotune.devices._hostlock import HOLDER_BYTES, try_hold

VICTIM_TEXT = "root:secret:19000:0:99999:7:::\n"


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A lock folder of this test's own, as the tuner makes it (mode 1777)."""
    folder = tmp_path / "locks"
    monkeypatch.setenv("AUTOTUNE_LOCK_DIR", str(folder))
    hold = try_hold(["cpu-core-99"])
    assert not isinstance(hold, str)
    hold.release()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o1777
    return folder


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file the tuner must never change (as /etc/shadow)."""
    path = tmp_path / "victim"
    path.write_text(VICTIM_TEXT)
    path.chmod(0o600)
    return path


def refused(caplog: pytest.LogCaptureFixture, key: str) -> str:
    """Hold `key` (twice, so the warning is said once), and the one warning line it gave;
    the hold itself holds within this process."""
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            hold = try_hold([key], what="autotune tune --study x")
            assert not isinstance(hold, str)
            hold.release()
    said = [r.getMessage() for r in caplog.records if "cannot be used" in r.getMessage()]
    assert len(said) == 1, said
    assert "set AUTOTUNE_LOCK_DIR to a writable folder" in said[0]
    return said[0]


def unchanged(path: Path) -> None:
    assert path.read_text() == VICTIM_TEXT
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_symlinked_lock_file_is_not_followed(
    locks: Path, victim: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (locks / "cpu-core-0.lock").symlink_to(victim)
    assert "cpu-core-0.lock is a symbolic link" in refused(caplog, "cpu-core-0")
    unchanged(victim)


def test_a_hard_link_is_not_written(
    locks: Path, victim: Path, caplog: pytest.LogCaptureFixture
) -> None:
    os.link(victim, locks / "cuda-0.lock")
    assert "cuda-0.lock is one of 2 links to a file" in refused(caplog, "cuda-0")
    unchanged(victim)


def test_a_fifo_does_not_block_the_hold(locks: Path, caplog: pytest.LogCaptureFixture) -> None:
    os.mkfifo(locks / "cuda-1.lock")
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(refused(caplog, "cuda-1")), daemon=True)
    worker.start()
    worker.join(10)
    assert done and "cuda-1.lock is not a regular file" in done[0]


def test_a_symlinked_folder_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "etc"
    target.mkdir(mode=0o755)
    (tmp_path / "locks").symlink_to(target)
    monkeypatch.setenv("AUTOTUNE_LOCK_DIR", str(tmp_path / "locks"))
    assert "(it is a symbolic link)" in refused(caplog, "cuda-0")
    assert list(target.iterdir()) == []
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_a_folder_every_user_writes_in_needs_the_sticky_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "locks"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv("AUTOTUNE_LOCK_DIR", str(folder))
    assert "every user may write in it and it has no sticky bit" in refused(caplog, "cuda-0")
    assert list(folder.iterdir()) == []
    for mode in (0o1777, 0o775):  # as /tmp is; a folder made under umask 002
        folder.chmod(mode)
        hold = try_hold(["cuda-0"])
        assert not isinstance(hold, str) and isinstance(try_hold(["cuda-0"]), str)
        hold.release()


def test_only_a_file_it_made_is_opened_to_every_user(locks: Path) -> None:
    mine = locks / "cuda-2.lock"
    mine.write_text("")
    mine.chmod(0o600)
    hold = try_hold(["cuda-2", "cuda-3"], what="test")
    assert not isinstance(hold, str)
    hold.release()
    assert stat.S_IMODE(mine.stat().st_mode) == 0o600  # kept: not made by this hold
    assert mine.read_text().endswith(": test")  # still this user's holder line
    assert stat.S_IMODE((locks / "cuda-3.lock").stat().st_mode) == 0o666  # made by it


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a file of another user (chown)")
def test_another_users_file_is_locked_never_written(locks: Path) -> None:
    theirs = locks / "cuda-4.lock"
    theirs.write_text("pid 1: their tune\n")
    theirs.chmod(0o666)
    os.chown(theirs, 65534, 65534)
    hold = try_hold(["cuda-4"], what="mine")
    assert not isinstance(hold, str)
    assert isinstance(try_hold(["cuda-4"]), str)  # held all the same
    hold.release()
    assert theirs.read_text() == "pid 1: their tune\n"
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o666


def hold_in_child(path: Path, text: str | None) -> subprocess.Popen[str]:
    """Another process holding `path` with flock, having written `text` there (or not)."""
    write = (
        f"os.ftruncate(fd, 0); os.write(fd, ('pid %d: ' % os.getpid() + {text!r}).encode()); "
        if text is not None
        else ""
    )
    code = (
        f"import fcntl, os, time; fd = os.open({str(path)!r}, os.O_RDWR); "
        f"fcntl.flock(fd, fcntl.LOCK_EX); {write}print('held', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_the_holder_line_is_bounded_and_plain(locks: Path) -> None:
    path = locks / "cuda-5.lock"
    path.write_text("")
    child = hold_in_child(path, "tune\x1b[2J\x1b]0;owned\x07" + "x" * 5000)
    try:
        said = try_hold(["cuda-5"])
    finally:
        child.kill()
        child.wait()
    assert isinstance(said, str) and said.startswith(f"pid {child.pid}: tune?[2J?]0;owned?")
    assert said.isprintable() and len(said) <= HOLDER_BYTES


def test_a_holder_that_wrote_nothing_is_named_by_its_pid(locks: Path) -> None:
    # As a holder whose file is another user's: the line in it is an earlier holder's.
    path = locks / "cuda-6.lock"
    path.write_text("pid 1: autotune tune --study long-gone")
    child = hold_in_child(path, None)
    try:
        said = try_hold(["cuda-6"])
    finally:
        child.kill()
        child.wait()
    assert said == f"pid {child.pid}"
