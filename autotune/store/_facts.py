"""What one trial learned about its engine besides the metrics, and who ran it: typed records.

`measure` writes the facts (to `measurement.json` and the trial's `engine` attribute), and `export`,
the dashboard and the study read it by field, never by string key. A stored value is read
leniently: a field an older version did not write is None, one it wrote that is no longer
known is ignored.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.engine import EngineFacts

_M = TypeVar("_M", bound=BaseModel)


class Abort(BaseModel):
    """When and why the trial gave up on its engine."""

    kind: str = Field(description="engine (it exited), hang, deadline or pruned")
    reason: str = ""
    noticed_unix: float | None = Field(
        default=None, description="wall clock (epoch s) when it was noticed, to compare with a kill"
    )

    @classmethod
    def now(cls, kind: str, reason: str) -> Abort:
        return cls(kind=kind, reason=reason, noticed_unix=round(time.time(), 3))


class Cost(BaseModel):
    """What the trial's cost_per_mtok was computed from."""

    per_device_hour: float = Field(description="the user's price of one device for an hour")
    devices: int = Field(description="devices the config holds (TP x PP; a CPU host: 1)")


class VoidedRun(BaseModel):
    """A run left out of the trial's measurement and made again: the tuner itself stood still
    while it ran (`autotune.bench.StallWatch`: its tokens were stamped late), or its rate
    departed from the trial's other batches by more than their noise allows (`degraded`, a bad
    window of the host). Its records are kept in `voided/run-K.jsonl`."""

    stall_s: float | None = Field(
        default=None, description="how long the tuner's own event loop stood still (a stall)"
    )
    limit_s: float | None = Field(default=None, description="the stall limit of that run")
    records: str = Field(default="", description="the voided run's records, in the trial folder")
    reason: str = Field(default="stall", description="stall, or degraded: why it was voided")


class TrialFacts(EngineFacts):
    """The engine's own facts (`EngineFacts`: version, KV capacity, reserved CPUs) and what the
    trial measured around its benchmark. None: not known for this trial."""

    model_config = ConfigDict(extra="ignore")

    startup_s: float | None = Field(
        default=None, description="seconds from launch to ready (offline: `vllm.LLM(...)`)"
    )
    generate_s: float | None = Field(default=None, description="offline: seconds of the one batch")
    peak_memory_bytes: int | None = Field(
        default=None, description="offline: the batch process's peak device memory"
    )
    counters: dict[str, float] | None = Field(
        default=None, description="what the engine's /metrics counters added over the measured run"
    )
    repeats: int | None = Field(
        default=None, description="batches of the workload on the one engine (pooled)"
    )
    sized: str | None = Field(
        default=None, description="why the run's batches ended: precise enough, or a cap"
    )
    capacity: dict[str, Any] | None = Field(
        default=None, description="the capacity search, as `capacity.json` (rate, levels)"
    )
    cost: Cost | None = None
    abort: Abort | None = None
    voided: list[VoidedRun] | None = Field(
        default=None, description="runs made again: the tuner stalled in them, or degraded"
    )
    stall_kept_s: float | None = Field(
        default=None,
        description="the worst stall of a run kept after two voided ones (a host that stalls "
        "in run after run): its figures carry it",
    )
    turns: int | None = Field(
        default=None,
        description="measured in turns with other engines (a confirm round): its batches, "
        "each taken in turn; None: alone",
    )
    quiet_wait_s: float | None = Field(
        default=None,
        description="in turns: seconds it waited, in all, after its batches for its engine to "
        "go quiet before handing over",
    )

    @classmethod
    def read(cls, stored: Any) -> TrialFacts:
        """Stored facts (a dict from the store or `measurement.json`); what does not parse
        is left out rather than failing the reader of a whole study."""
        return read_lenient(cls, stored)

    def stored(self) -> dict[str, Any]:
        """The JSON the store and `measurement.json` keep (unknown fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)


class Worker(BaseModel):
    """Who runs (ran) the trial, and on what lease: what another worker reads to tell a dead
    worker's trial from a live one (`autotune.study._worker`)."""

    model_config = ConfigDict(extra="ignore")

    host: str | None = Field(default=None, description="the worker's host (its trial folder)")
    pid: int | None = Field(default=None, description="the tuner's process id on that host")
    started: float | None = Field(
        default=None, description="that process's start time (epoch s): a reused pid differs"
    )
    run: str | None = Field(default=None, description="the token of the runner in that process")
    lane: int = Field(default=0, description="the runner's lane (`--parallel`)")
    devices: str | None = Field(
        default=None, description="the leased devices (`0,1`); None: the host's cores"
    )

    @classmethod
    def read(cls, stored: Any) -> Worker:
        """A stored worker (lenient as `TrialFacts.read`)."""
        return read_lenient(cls, stored)

    def stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def read_lenient(model: type[_M], stored: Any) -> _M:
    """`stored` as `model`, a field that does not parse left out (not a dict: the empty one)."""
    if not isinstance(stored, dict):
        return model()
    try:
        return model.model_validate(stored)
    except ValidationError as err:
        bad = {str(e["loc"][0]) for e in err.errors() if e["loc"]}
        return model.model_validate({k: v for k, v in stored.items() if k not in bad})
