"""Reading request traces: when each request came, how long its prompt and output were, and
which prompt blocks it shares with others.

A row is a JSON object (JSONL) or a CSV line with a header. Fields, by the first name found:

- time: `timestamp` (milliseconds, as Mooncake's traces) or `timestamp_s` (seconds); a string
  is an ISO date-time (Azure's LLM inference traces, `TIMESTAMP`);
- prompt length: `input_length`, `input_tokens`, `ContextTokens`;
- output length: `output_length`, `output_tokens`, `GeneratedTokens`;
- optional `hash_ids`: the ids of the prompt's blocks (a JSON list, or space-separated in CSV).

Rows are returned in time order, times in seconds from the first row.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.bench._workload import WorkloadError
from autotune.inputs.limits import MAX_TOKENS
from autotune.inputs.userfiles import MIB, UserFileError, read_user_text

# A trace is read whole (public ones are a few MiB to a few hundred); a larger file is not one.
TRACE_LIMIT = 768 * MIB
_TIME_MS = ("timestamp", "TIMESTAMP")
_INPUT = ("input_length", "input_tokens", "ContextTokens")
_OUTPUT = ("output_length", "output_tokens", "GeneratedTokens")


@dataclass(frozen=True)
class TraceRow:
    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def read_trace(path: Path) -> list[TraceRow]:
    """Every row of a trace file, in time order; one-line errors naming the row."""
    try:
        text = read_user_text(path, TRACE_LIMIT, "trace")
    except UserFileError as exc:
        raise WorkloadError(str(exc)) from None
    if path.suffix.lower() == ".csv":
        items = [(f"row {n}", row) for n, row in enumerate(csv.DictReader(io.StringIO(text)), 2)]
    else:
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    items.append((f"line {number}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise WorkloadError(
                        f"{path}: line {number}: invalid JSON ({exc.msg})"
                    ) from None
    rows = [_row(item, f"{path}: {where}") for where, item in items]
    if not rows:
        raise WorkloadError(f"trace {path} holds no request")
    rows.sort(key=lambda r: r.at_s)
    start = rows[0].at_s
    return [TraceRow(r.at_s - start, r.input_tokens, r.output_tokens, r.hash_ids) for r in rows]


def _row(item: Any, where: str) -> TraceRow:
    if not isinstance(item, dict):
        raise WorkloadError(f"{where}: expected an object")
    return TraceRow(
        at_s=_time(item, where),
        input_tokens=_count(item, _INPUT, where),
        output_tokens=_count(item, _OUTPUT, where),
        hash_ids=_hash_ids(item.get("hash_ids"), where),
    )


def _time(item: dict[str, Any], where: str) -> float:
    if item.get("timestamp_s") not in (None, ""):
        return _number(item["timestamp_s"], "timestamp_s", where)
    name = next((n for n in _TIME_MS if item.get(n) not in (None, "")), None)
    if name is None:
        raise WorkloadError(f"{where}: needs a 'timestamp' (ms) or 'timestamp_s'")
    value = item[name]
    if isinstance(value, str) and not _is_number(value):
        try:
            return dt.datetime.fromisoformat(value.strip()).timestamp()
        except ValueError:
            raise WorkloadError(f"{where}: {name} {value!r} is neither ms nor a date") from None
    return _number(value, name, where) / 1000.0


def _count(item: dict[str, Any], names: tuple[str, ...], where: str) -> int:
    name = next((n for n in names if item.get(n) not in (None, "")), None)
    if name is None:
        raise WorkloadError(f"{where}: needs one of {', '.join(repr(n) for n in names)}")
    value = _number(item[name], name, where)
    if not 1 <= value <= MAX_TOKENS or value != int(value):
        raise WorkloadError(
            f"{where}: {name} must be a whole number from 1 to {MAX_TOKENS:,} (got {item[name]!r})"
        )
    return int(value)


def _hash_ids(value: Any, where: str) -> tuple[int, ...]:
    if value in (None, ""):
        return ()
    parts = value.split() if isinstance(value, str) else value
    if not isinstance(parts, list):
        raise WorkloadError(f"{where}: hash_ids must be a list of ids")
    try:
        return tuple(int(v) for v in parts)
    except (TypeError, ValueError):
        raise WorkloadError(f"{where}: hash_ids must be whole numbers") from None


def _number(value: Any, name: str, where: str) -> float:
    if isinstance(value, bool):
        raise WorkloadError(f"{where}: {name} is not a number ({value!r})")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise WorkloadError(f"{where}: {name} is not a number ({value!r})") from None
    if not math.isfinite(number):  # a time or a count of inf or nan orders and counts nothing
        raise WorkloadError(f"{where}: {name} is not a finite number ({value!r})")
    return number


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
