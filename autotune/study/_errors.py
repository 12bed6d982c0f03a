"""The study's own error: why it cannot go on, for the user."""

from __future__ import annotations

from typing import Any


class StudyError(Exception):
    """The study cannot go on; the message says why, for the user."""


class StudyMismatch(StudyError):
    """The study exists with other settings than the command gives: bad input (exit 2)."""


def difference(stored: Any, given: Any) -> str:
    """`input=32, not input=64`: only the keys of a setting that differ."""
    if not (isinstance(stored, dict) and isinstance(given, dict)):
        return f"{stored!r}, not {given!r}"
    keys = [k for k in {**stored, **given} if stored.get(k) != given.get(k)]
    was = ", ".join(f"{k}={stored.get(k)!r}" for k in keys)
    now = ", ".join(f"{k}={given.get(k)!r}" for k in keys)
    return f"{was}, not {now}"
