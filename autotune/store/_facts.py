"""What one trial learned about its engine besides the metrics: one typed record.

`measure` writes it (to `measurement.json` and the trial's `engine` attribute), and `export`,
the dashboard and the study read it by field, never by string key. A stored value is read
leniently: a field an older version did not write is None, one it wrote that is no longer
known is ignored.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.engine import EngineFacts


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
        default=None, description="benchmark runs on the one engine (objectives: their medians)"
    )
    capacity: dict[str, Any] | None = Field(
        default=None, description="the capacity search, as `capacity.json` (rate, levels)"
    )
    cost: Cost | None = None
    abort: Abort | None = None

    @classmethod
    def read(cls, stored: Any) -> TrialFacts:
        """Stored facts (a dict from the store or `measurement.json`); what does not parse
        is left out rather than failing the reader of a whole study."""
        if not isinstance(stored, dict):
            return cls()
        try:
            return cls.model_validate(stored)
        except ValidationError as err:
            bad = {str(e["loc"][0]) for e in err.errors() if e["loc"]}
            return cls.model_validate({k: v for k, v in stored.items() if k not in bad})

    def stored(self) -> dict[str, Any]:
        """The JSON the store and `measurement.json` keep (unknown fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)
