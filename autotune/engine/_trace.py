"""What a torch profiler trace of a vLLM engine says: operators by self time, prefill vs decode.

The trace is the Chrome trace JSON (gzip'd or not) that `torch.profiler` writes. Pure
functions over its events; nothing here runs an engine.

- Self time of an operator event (`ph: "X"`, category `cpu_op`) is its duration minus that of
  its direct children: the events nested within it on the same process and thread. Python
  function events (present only with stack recording) are left out of the nesting, so an
  operator implemented in Python keeps its Python time as its own, as torch's own table counts it.
- Phases: vLLM marks every model step of the worker with a `user_annotation`
  `execute_context_N(T)_generation_M(G)` (N requests with T prompt tokens still in prefill, M
  requests decoding G tokens; `Worker.annotate_profile`, vllm/v1/worker/gpu_worker.py, which
  the CPU worker inherits). A step with any prefill request is a prefill step (a mixed chunked
  step counts as prefill); a step with only decoding requests is a decode step. The phase
  times are the summed wall times of those marks: `execute_model`, sampling excluded.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TraceEvent = Mapping[str, Any]

OPERATOR_CATEGORIES = frozenset({"cpu_op"})
_TRANSPARENT = frozenset({"python_function"})  # not an operator's child: see the module doc
_STEP = re.compile(
    r"^execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)"
)
STEP_CATEGORY = "user_annotation"  # CPU side; GPU traces repeat it as `gpu_user_annotation`


class TraceError(Exception):
    """A trace file cannot be read as a Chrome trace."""


@dataclass(frozen=True)
class OpTime:
    """One operator's self time summed over its calls, and its share of all operators'."""

    name: str
    self_ms: float
    share: float
    calls: int


@dataclass(frozen=True)
class Phases:
    """Wall time of the worker's model steps, split into prefill and decode steps."""

    prefill_ms: float
    decode_ms: float
    prefill_steps: int
    decode_steps: int

    def to_dict(self) -> dict[str, Any]:
        total = self.prefill_ms + self.decode_ms
        return {
            "prefill_share": round(self.prefill_ms / total, 4) if total else 0.0,
            "decode_share": round(self.decode_ms / total, 4) if total else 0.0,
            "prefill_ms": round(self.prefill_ms, 3),
            "decode_ms": round(self.decode_ms, 3),
            "steps": {"prefill": self.prefill_steps, "decode": self.decode_steps},
        }


def read_profiler_trace(path: Path) -> list[TraceEvent]:
    """The events of a Chrome trace file (`.json` or `.json.gz`)."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, EOFError, ValueError) as exc:
        raise TraceError(f"{path.name}: not a readable trace ({exc})") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path.name}: no traceEvents")
    return [e for e in events if isinstance(e, dict)]


def _spans(events: Iterable[TraceEvent]) -> dict[tuple[Any, Any], list[TraceEvent]]:
    """Complete (`X`) events with a duration, by (pid, tid), in start order, parents first."""
    threads: dict[tuple[Any, Any], list[TraceEvent]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") not in _TRANSPARENT and "dur" in e and "ts" in e:
            threads[(e.get("pid"), e.get("tid"))].append(e)
    for spans in threads.values():
        spans.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
    return threads


def self_times(events: Iterable[TraceEvent]) -> list[tuple[TraceEvent, float]]:
    """Every complete event with its self time in microseconds: its duration minus the time
    of its direct children (the part of each child inside it)."""
    out: list[tuple[TraceEvent, float]] = []
    for spans in _spans(events).values():
        stack: list[tuple[TraceEvent, float, list[float]]] = []  # (event, end, [children time])
        done: list[tuple[TraceEvent, list[float]]] = []
        for e in spans:
            start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack:
                stack[-1][2][0] += min(end, stack[-1][1]) - start
            child_time = [0.0]
            stack.append((e, end, child_time))
            done.append((e, child_time))
        out += [(e, max(0.0, float(e["dur"]) - kids[0])) for e, kids in done]
    return out


def top_ops(
    events: Iterable[TraceEvent], limit: int = 20, categories: frozenset[str] = OPERATOR_CATEGORIES
) -> list[OpTime]:
    """Operators by summed self time, largest first; `share` is of all operators' self time."""
    totals: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for e, own in self_times(events):
        if e.get("cat") in categories:
            name = str(e.get("name", "?"))
            totals[name] += own
            calls[name] += 1
    grand = sum(totals.values())
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return [
        OpTime(name, round(us / 1000, 3), round(us / grand, 4) if grand else 0.0, calls[name])
        for name, us in ranked
    ]


def step_kind(name: str) -> str | None:
    """`prefill` or `decode` for a vLLM step mark, None for any other name (or an empty step)."""
    match = _STEP.match(name)
    if match is None:
        return None
    context, generation = int(match.group(1)), int(match.group(3))
    if context > 0:
        return "prefill"
    return "decode" if generation > 0 else None


def step_phases(events: Sequence[TraceEvent]) -> Phases | None:
    """Prefill and decode step times from vLLM's per-step marks; None when there are none."""
    ms = {"prefill": 0.0, "decode": 0.0}
    steps = {"prefill": 0, "decode": 0}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != STEP_CATEGORY:
            continue
        kind = step_kind(str(e.get("name", "")))
        if kind is not None:
            ms[kind] += float(e.get("dur", 0.0)) / 1000
            steps[kind] += 1
    if not any(steps.values()):
        return None
    return Phases(ms["prefill"], ms["decode"], steps["prefill"], steps["decode"])


NO_STEP_MARKS = (
    "the trace has no per-step marks (`execute_context_N(T)_generation_M(G)` annotations of "
    "vLLM's worker), so prefill and decode time cannot be told apart"
)


_TABLE_ROW = re.compile(r"^\s*(\S.*?)\s{2,}(\d[\d.]*)%\s+([\d.]+)(us|ms|s)\s")


def table_self_ms(text: str) -> dict[str, float]:
    """Self CPU time per operator from torch's `key_averages().table()` text (vLLM's
    `profiler_out.txt`): its first two numeric columns are `Self CPU %` and `Self CPU`.
    Long names are cut by the table; used to cross-check the trace's numbers."""
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _TABLE_ROW.match(line)
        if match:
            out[match.group(1)] = float(match.group(3)) * scale[match.group(4)]
    return out
