"""One raw measurement per request, and its JSON-lines storage."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from itertools import pairwise
from pathlib import Path


@dataclass(frozen=True)
class RequestRecord:
    """What one request did, in seconds of the client's clock.

    `token_times` holds the arrival time of every streamed chunk that carried at least one
    token; its first element is `first_token_time`. A failed request has `error` set and may
    have partial times.
    """

    index: int
    send_time: float
    first_token_time: float | None
    token_times: tuple[float, ...]
    end_time: float
    prompt_tokens: int
    output_tokens: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft(self) -> float | None:
        """Time to first token: first token time - send time (None without a token)."""
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.send_time

    @property
    def e2e(self) -> float:
        """Last token time - send time (end time - send time without a token)."""
        last = self.token_times[-1] if self.token_times else self.end_time
        return last - self.send_time

    @property
    def itl(self) -> tuple[float, ...]:
        """Gaps between consecutive token chunks; they sum to e2e - ttft."""
        return tuple(later - earlier for earlier, later in pairwise(self.token_times))

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (e2e - ttft) / (output_tokens - 1)."""
        ttft = self.ttft
        if ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - ttft) / (self.output_tokens - 1)


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    """Write records as JSON lines (floats keep every bit: `read_records` gives them back)."""
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(asdict(record)) + "\n")


def read_records(path: Path) -> list[RequestRecord]:
    """Records written by `write_records`; a malformed line raises ValueError naming it."""
    names = {field.name for field in fields(RequestRecord)}
    records = []
    with path.open(encoding="utf-8") as src:
        for number, line in enumerate(src, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if set(data) - names:
                    raise ValueError(f"unknown fields {sorted(set(data) - names)}")
                data["token_times"] = tuple(data["token_times"])
                records.append(RequestRecord(**data))
            except (ValueError, TypeError, KeyError) as exc:
                raise ValueError(f"{path}: line {number}: bad record ({exc})") from None
    return records
