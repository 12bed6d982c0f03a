"""The study's own error: why it cannot go on, for the user."""

from __future__ import annotations


class StudyError(Exception):
    """The study cannot go on; the message says why, for the user."""


class StudyMismatch(StudyError):
    """The study exists with other settings than the command gives: bad input (exit 2)."""
