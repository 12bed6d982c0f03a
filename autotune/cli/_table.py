"""`show --format json|csv`: every trial as data (columns in `autotune.answer.trial_data`)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


def rows_json(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a JSON array; strict JSON (a non-finite float is an error, not `NaN`:
    `trial_rows` gives None for those)."""
    return json.dumps(list(rows), indent=2, allow_nan=False)


def rows_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """The flat rows as CSV with a header; None is an empty cell, a bool `true` / `false`."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in row.items()})
    return out.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return value
