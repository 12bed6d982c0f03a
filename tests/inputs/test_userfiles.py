"""Paths and files a user names: refused in one line before anything is read or written."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from autotune.inputs.userfiles import (
    UserFileError,
    folder_problem,
    output_problem,
    path_problem,
    read_user_text,
)


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("", "is empty"),
        ("a" * 256, "has a name of 256 bytes"),
        ("ok/" + "é" * 128, "has a name of 256 bytes"),  # 128 characters, 2 bytes each
        ("/".join(["b" * 200] * 21), "is 4,220 bytes long; a path may be at most 4,095"),
        ("a\0b", "holds a control character ('\\x00')"),
        ("a\nb", "holds a control character ('\\n')"),
        ("a\x1bb", "holds a control character ('\\x1b')"),
        ("a\x7fb", "holds a control character ('\\x7f')"),
    ],
    ids=["empty", "name-256", "name-256-bytes", "path-4220", "nul", "newline", "escape", "del"],
)
def test_a_path_no_file_system_holds_is_named_so(path: str, problem: str) -> None:
    assert problem in str(path_problem(path))


def test_a_path_a_file_system_holds_passes() -> None:
    for path in ("studies", "a" * 255, "/".join(["b" * 200] * 20), "dir with spaces/é.yaml"):
        assert path_problem(path) is None


def test_a_file_is_not_a_folder_nor_a_folder_a_file(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("x")
    assert folder_problem(file) == "is a file, not a folder"
    assert folder_problem(file / "sub" / "deeper") == f"{file} is a file"
    assert folder_problem(tmp_path / "new" / "folder") is None
    assert output_problem(tmp_path) == "is a folder; name a file to write"
    assert output_problem(file / "out.json") == f"{file} is a file"
    assert output_problem(tmp_path / "out.json") is None


LIMIT = 1024


def test_a_device_is_refused_without_being_read() -> None:
    with pytest.raises(UserFileError, match=r"^spec /dev/zero: not a regular file"):
        read_user_text("/dev/zero", LIMIT, "spec")  # read, it would never end


def test_a_fifo_is_refused_without_being_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done: list[BaseException] = []
    reader = threading.Thread(target=lambda: _caught(done, fifo), daemon=True)
    reader.start()
    reader.join(timeout=10)  # opened, a FIFO with no writer blocks for ever
    assert not reader.is_alive()
    assert "not a regular file (a device, a pipe or a socket)" in str(done[0])


def _caught(done: list[BaseException], path: Path) -> None:
    try:
        read_user_text(path, LIMIT, "spec")
    except UserFileError as exc:
        done.append(exc)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(b"x" * LIMIT), None),
        (lambda p: os.truncate(p.write_bytes(b"") or p, LIMIT + 1), "larger than 1 KiB"),
        (lambda p: p.write_bytes(b"ok\n\xff\n"), "line 2: not UTF-8 text (byte 0xff)"),
        (lambda p: p.mkdir(), "is a folder, not a file"),
        (lambda p: None, "cannot read spec"),
    ],
    ids=["at-the-bound", "past-the-bound", "not-utf8", "folder", "missing"],
)
def test_a_file_is_read_within_its_bound(tmp_path: Path, make: object, message: str | None) -> None:
    path = tmp_path / "spec.yaml"
    make(path)  # type: ignore[operator]
    if message is None:
        assert len(read_user_text(path, LIMIT, "spec")) == LIMIT
        return
    with pytest.raises(UserFileError, match="spec") as info:
        read_user_text(path, LIMIT, "spec")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_file_whose_size_is_not_its_length_is_read_no_further_than_the_bound() -> None:
    # A /proc file says 0 bytes and holds more: the bound holds on what is read.
    with pytest.raises(UserFileError, match="larger than 16 bytes"):
        read_user_text("/proc/self/status", 16, "spec")
