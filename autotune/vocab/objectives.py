"""The objectives a study optimizes: a metric of docs/metrics.md and its direction, and the
objectives a study has when it names none (online, offline, with a capacity search)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autotune.bench import METRIC_NAMES

Direction = Literal["maximize", "minimize"]

DEFAULT_OBJECTIVES: tuple[tuple[str, Direction], ...] = (
    ("output_throughput", "maximize"),
    ("p99_ttft_ms", "minimize"),
    ("p99_tpot_ms", "minimize"),
)


# Offline (one `vllm.LLM.generate` batch): tokens per second; add `peak_memory_gib:min` to
# trade speed against memory.
OFFLINE_OBJECTIVES: tuple[tuple[str, Direction], ...] = (("output_throughput", "maximize"),)

# With a capacity search: the load a config sustains, and the latencies at that load.
CAPACITY_OBJECTIVES: tuple[tuple[str, Direction], ...] = (
    ("capacity_rps", "maximize"),
    ("p99_ttft_ms", "minimize"),
    ("p99_tpot_ms", "minimize"),
)


class Objective(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str = Field(description="A metric name from docs/metrics.md")
    direction: Direction

    @field_validator("metric")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in METRIC_NAMES:
            raise ValueError(f"unknown metric {value!r}; known: {', '.join(METRIC_NAMES)}")
        return value
