"""Paths and files a user names, checked before anything is read or written.

A path is refused in one line when no file system could hold it (a name over 255 bytes, a
path over 4,095, a control character) or when it names the wrong kind of thing (a file where
a folder is needed, a folder, a device or a pipe where a file is). A file is read with a bound
on its size, chosen per kind by its reader: `--spec /dev/zero` and a FIFO are refused without
being opened, a growing or oversized file after reading no more than the bound.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

NAME_MAX = 255  # bytes of one name in a path (Linux and macOS file systems)
PATH_MAX = 4096  # bytes of a whole path, its terminating NUL included (Linux)

KIB = 1024
MIB = 1024 * KIB


class UserFileError(ValueError):
    """A path or file the user gave cannot be used; the message is one line naming it,
    `reason` the same without its name (for a caller that names the file its own way)."""

    def __init__(self, where: str, reason: str, unread: bool = False) -> None:
        super().__init__(f"{'cannot read ' if unread else ''}{where}: {reason}")
        self.reason = reason


def path_problem(path: str | Path) -> str | None:
    """Why no file system could hold `path` (None when one could)."""
    text = str(path)
    if not text:
        return "is empty"
    bad = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        return f"holds a control character ({bad!r}); name it without one"
    size = len(os.fsencode(text))
    if size >= PATH_MAX:
        return f"is {size:,} bytes long; a path may be at most {PATH_MAX - 1:,}"
    for name in Path(text).parts:
        if len(os.fsencode(name)) > NAME_MAX:
            return (
                f"has a name of {len(os.fsencode(name)):,} bytes ({name[:24]}...); a file "
                f"system allows at most {NAME_MAX}"
            )
    return None


def folder_problem(path: str | Path) -> str | None:
    """Why `path` cannot be (or become) a folder: `path_problem`, or it or a folder above it
    is a file."""
    if (problem := path_problem(path)) is not None:
        return problem
    file = _file_at_or_above(Path(path))
    if file is None:
        return None
    return "is a file, not a folder" if file == Path(path) else f"{file} is a file"


def output_problem(path: str | Path) -> str | None:
    """Why a file cannot be written at `path`: `path_problem`, a folder there, or a file
    where a folder above it should be."""
    if (problem := path_problem(path)) is not None:
        return problem
    target = Path(path)
    if target.is_dir():
        return "is a folder; name a file to write"
    file = _file_at_or_above(target.parent)
    return None if file is None else f"{file} is a file"


def _file_at_or_above(folder: Path) -> Path | None:
    """The first of `folder` and the folders above it that exists and is not a folder."""
    for above in (folder, *folder.parents):
        if _exists(above) and not above.is_dir():
            return above
    return None


def check_path(
    path: str | Path, what: str, problem_of: Callable[[str | Path], str | None] = path_problem
) -> Path:
    """`path`, or UserFileError `WHAT PATH: problem` (`problem_of`: `path_problem`,
    `folder_problem` or `output_problem`)."""
    if (problem := problem_of(path)) is not None:
        raise UserFileError(f"{what} {shown_path(path)}", problem)
    return Path(path)


def read_user_text(path: str | Path, limit: int, what: str) -> str:
    """The UTF-8 text of the regular file `path`, at most `limit` bytes. UserFileError, one
    line naming `what` and the path, for any other: missing, a folder, a device or FIFO
    (never opened: `/dev/zero` would never end, a FIFO would block), too large, not UTF-8."""
    where = f"{what} {shown_path(path)}"
    if (problem := path_problem(path)) is not None:
        raise UserFileError(where, problem)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise UserFileError(where, _reason(exc), unread=True) from None
    if stat.S_ISDIR(info.st_mode):
        raise UserFileError(where, "is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise UserFileError(where, "not a regular file (a device, a pipe or a socket)")
    too_large = f"larger than {_size(limit)}, more than a {what} can be"
    if info.st_size > limit:
        raise UserFileError(where, too_large)
    try:
        with open(path, "rb") as src:
            data = src.read(limit + 1)  # a file that grows (or a /proc file of size 0)
    except OSError as exc:
        raise UserFileError(where, _reason(exc), unread=True) from None
    if len(data) > limit:
        raise UserFileError(where, too_large)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        reason = f"line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x})"
        raise UserFileError(where, reason) from None


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long for this file system, a loop of links
        return False


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _size(limit: int) -> str:
    if limit >= MIB:
        return f"{limit / MIB:,.0f} MiB"
    return f"{limit / KIB:,.0f} KiB" if limit >= KIB else f"{limit} bytes"


def shown_path(path: str | Path) -> str:
    """The path on one line: quoted where it holds a control character, cut where long."""
    text = str(path)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        text = repr(text)
    return text if len(text) <= 80 else f"{text[:38]}...{text[-38:]}"  # its name at the end
