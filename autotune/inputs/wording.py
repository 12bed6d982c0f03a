"""Validation errors in plain words: one short phrase per pydantic error, never its wording.

Every edge that validates with pydantic (the spec, workloads, search spaces) and the CLI's
option parsing (typer coerces option values with pydantic) says what it expected here, so a
user reads `expected a number > 0`, not `Input should be greater than 0`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

from pydantic_core import ErrorDetails

# pydantic error type -> the phrase, formatted with the error's context.
_PHRASES = {
    "greater_than": "expected a number > {gt}",
    "greater_than_equal": "expected a number >= {ge}",
    "less_than": "expected a number < {lt}",
    "less_than_equal": "expected a number <= {le}",
    "multiple_of": "expected a multiple of {multiple_of}",
    "finite_number": "expected a finite number",
    "int_parsing": "expected a whole number",
    "int_type": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_parsing": "expected a number",
    "float_type": "expected a number",
    "bool_parsing": "expected true or false",
    "bool_type": "expected true or false",
    "string_type": "expected a text value",
    "string_too_short": "must not be empty",
    "string_pattern_mismatch": "does not match the pattern {pattern}",
    "too_short": "expected at least {min_length} item(s)",
    "literal_error": "expected {expected}",
    "enum": "expected {expected}",
    "dict_type": "expected a mapping (key: value)",
    "model_type": "expected a mapping (key: value)",
    "model_attributes_type": "expected a mapping (key: value)",
    "list_type": "expected a list",
    "missing": "required",
    "extra_forbidden": "unknown field",
    "path_type": "expected a path",
    "none_required": "expected null",
}

# pydantic's own phrases (typer's option coercion passes them on as text) -> plain words.
_TEXT = (
    (r"Input should be a valid integer[^;]*", "expected a whole number"),
    (r"Input should be a valid number[^;]*", "expected a number"),
    (r"Input should be a valid boolean[^;]*", "expected true or false"),
    (r"Input should be greater than or equal to", "expected a number >="),
    (r"Input should be greater than", "expected a number >"),
    (r"Input should be less than or equal to", "expected a number <="),
    (r"Input should be less than", "expected a number <"),
    (r"Input should be", "expected"),
    (r"Extra inputs are not permitted", "unknown field"),
    (r"Field required", "required"),
    (r"^Value error, ", ""),
    (r"^Assertion failed, ", ""),
)


def plain_message(error: ErrorDetails) -> str:
    """The message of one pydantic error in plain words (without its location)."""
    phrase = _PHRASES.get(error["type"])
    context: dict[str, Any] = {
        key: f"{value:g}" if isinstance(value, float) else value
        for key, value in (error.get("ctx") or {}).items()
    }
    if phrase is not None:
        try:
            return phrase.format(**context)
        except (KeyError, IndexError):
            pass
    return plain_text(error["msg"])


def plain_text(message: str) -> str:
    """A message that may hold pydantic's phrases, with them put in plain words."""
    for pattern, words in _TEXT:
        message = re.sub(pattern, words, message)
    return " ".join(message.split())


def shown(value: Any) -> str:
    """A value as the user typed it: bare when it is one word, quoted otherwise (control
    characters escaped); past 80 characters, its start and end."""
    text = str(value)
    if not (text and re.fullmatch(r"[\w.:/+*=@-]+", text)):
        text = repr(text)
    return text if len(text) <= 80 else f"{text[:38]}...{text[-38:]}"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'X'?)` for the closest of `choices`, or "" when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
