"""The fields of a tuning study's spec, each with what it accepts (`SpecFields`); what they
ask of each other is `_implied`, the whole is `TuneSpec` (`_spec`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from autotune.bench import (
    METRIC_NAMES,
    CapacitySearch,
    LoadClientName,
    LoadProfile,
    Precision,
    Workload,
    parse_workload,
)
from autotune.inputs.limits import (
    MAX_CONFIRM,
    MAX_FACTOR,
    MAX_PARALLEL,
    MAX_REPEATS,
    MAX_ROUNDS,
    MAX_TRIALS,
    Price,
    Seed,
)
from autotune.spec._engine import EngineSpec
from autotune.spec._file import path_field_problem
from autotune.spec._flags import parse_relative
from autotune.vocab.objectives import (
    DEFAULT_OBJECTIVES,
    Objective,
)

# Settings a stored study may still name that the spec no longer has (a speed probe: on the
# real engine it added noise; autotune.answer.repeats says what handles drift instead).
RETIRED_FIELDS = ("speed_probe",)


class SpecFields(BaseModel):
    """A tuning study's fields, each checked alone (bounds, known metric names, paths checked
    before anything is made under them). Frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        """Settings that studies stored before they were removed: read and dropped (a study
        made with them is confirmed and joined as any other)."""
        if isinstance(data, dict) and any(k in data for k in RETIRED_FIELDS):
            data = {k: v for k, v in data.items() if k not in RETIRED_FIELDS}
        return data

    study: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", description="Study name")
    model: str = Field(description="Model path (or hub name where a hub is reachable)")
    served_model_name: str | None = None
    scenario: Literal["online", "offline"] = Field(
        default="online",
        description="online: a vLLM server under load; offline: the workload as one "
        "`vllm.LLM(...).generate` batch",
    )
    space: str = Field(default="cpu", description="Search-space file or shipped name")
    workload: Workload = Field(default_factory=lambda: parse_workload("random"))
    load: LoadProfile = Field(default_factory=lambda: LoadProfile(rate=8.0))
    load_client: LoadClientName = Field(
        default="autotune",
        description="Who sends the measured requests: autotune's own streaming client, or "
        "vllm-bench (`vllm bench serve`, vLLM's reference client; text prompts, no trace)",
    )
    capacity: CapacitySearch | None = Field(
        default=None,
        description="Search each trial's highest rate within the SLOs (`--load capacity`) "
        "instead of measuring at `load.rate`",
    )
    slos: dict[str, float] = Field(default_factory=dict, description="metric -> upper bound")
    relative_slos: dict[str, float] = Field(
        default_factory=dict,
        description="metric -> factor of the baseline's own measurement (`--slo "
        "p99_tpot_ms=baseline*1.2`: no more than 20% worse than today); the bound is fixed "
        "once the baseline is measured and kept with the study",
    )
    objectives: list[Objective] = Field(
        default_factory=lambda: [Objective(metric=m, direction=d) for m, d in DEFAULT_OBJECTIVES],
        min_length=1,
    )
    max_error_rate: float = Field(default=0.0, ge=0, le=1, description="Above it: infeasible")
    min_agreement: float | None = Field(
        default=None, ge=0, le=1, description="Below it: infeasible. The share of greedy output "
        "tokens of fixed prompts that agree with the baseline's (0: measure, never exclude)",
    )  # fmt: skip
    trials: int = Field(
        default=8, ge=1, le=MAX_TRIALS, description="Measured trials in the study, in all"
    )
    search: Literal["goal", "pareto"] = Field(
        default="goal",
        description="goal: search for the first objective under the constraints (every "
        "objective is still measured and the Pareto front kept); pareto: search every "
        "objective with no preference",
    )
    sampler: Literal["auto", "tpe", "gp", "random", "nsga2"] = Field(
        default="auto",
        description="auto: the search's default (gp for goal, tpe for pareto)",
    )
    busy_share: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="A GPU or NPU with more than this share of its memory in use when the "
        "study starts (or a process on it) belongs to another job: no trial is given it",
    )
    remeasure: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Run the incumbent config again, so that a host whose speed drifts and a "
        "lucky run do not pick the winner (autotune.answer.repeats); auto: on for a goal search",
    )
    seed: Seed = Field(default=0, description="Sampler and workload seed")
    storage: str | None = Field(default=None, description="SQLAlchemy URL (default SQLite)")
    root: Path = Field(default=Path("studies"), description="Folder for studies")
    engine: EngineSpec = Field(default_factory=EngineSpec)
    baseline: dict[str, Any] | None = Field(
        default=None,
        description="Parameter values of trial 0 (default: the space's baselines); "
        "`tune --baseline serve.sh` fills it from what you run today",
    )
    warm_start: str | None = Field(
        default=None,
        description="Another study (same store, or its default file under root) whose Pareto "
        "configs a new study runs first",
    )
    reingest: bool = Field(
        default=False,
        description="A new study whose trial folders hold measurements (its database lost) "
        "records them first, each as the trial of its number",
    )
    parallel: int | Literal["auto"] = Field(
        default=1, description="Trials at once, on disjoint devices (auto: as the devices allow)"
    )
    devices: str | None = Field(
        default=None,
        description="Device ids the tuner may use, e.g. 0-3,6 (default: all, or those an "
        "inherited CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES allows)",
    )
    repair: bool = Field(
        default=False, description="Retry an OOM trial once with less memory (a linked trial)"
    )
    device_cost_per_hour: Price | None = Field(
        default=None,
        description="What one device (GPU, NPU; on CPU: the host) costs per hour; then "
        "cost_per_mtok, the cost of a million output tokens, is measured and may be an objective",
    )
    repeats: int = Field(
        default=1,
        ge=1,
        le=MAX_REPEATS,
        description="Benchmark runs per trial on its one engine; objectives are their medians "
        "and the spread (half the range) is kept",
    )
    prune: bool = Field(
        default=False,
        description="Stop a trial's benchmark early once its running metrics make it "
        "certainly infeasible or dominated by the front with `prune_margin` (status pruned)",
    )
    prune_margin: float = Field(default=0.1, ge=0, le=10, description="`prune`'s dominance margin")
    screen: Literal["auto", "on", "off"] = Field(
        default="auto", description="Predict proposals by the study's engine model; skip ruled out"
    )
    confirm: int = Field(
        default=0,
        ge=0,
        le=MAX_CONFIRM,
        description="After the budget, re-measure this many top front configs and the "
        "baseline in alternating rounds; the winner is picked by median minus spread",
    )
    confirm_rounds: int = Field(
        default=6,
        ge=1,
        le=MAX_ROUNDS,
        description="Confirm rounds at most: the step stops as soon as its sequential interval "
        "decides (a gain, none worth deploying, or worse)",
    )
    min_gain: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="The smallest gain worth deploying: a confirm step whose interval lies "
        "within +- this of 0 stops and keeps your defaults",
    )
    precision: Precision | None = Field(
        default_factory=Precision,
        description="Each trial's run goes on, batch after batch on its engine, until it is "
        "precise enough for its decision or a cap (docs/metrics.md); off (or null): one "
        "batch (or `repeats`)",
    )

    @field_validator("precision", mode="before")
    @classmethod
    def _precision_off(cls, value: Any) -> Any:
        return None if value == "off" else value

    @model_validator(mode="before")
    @classmethod
    def _relative_in_slos(cls, data: Any) -> Any:
        """A spec file may write `slos: {p99_tpot_ms: baseline*1.2}` as the flag does."""
        if not isinstance(data, dict) or not isinstance(data.get("slos"), dict):
            return data
        slos, relative = {}, dict(data.get("relative_slos") or {})
        for name, value in data["slos"].items():
            if isinstance(value, str) and value.strip().startswith("baseline"):
                relative[name] = parse_relative(f"slos.{name}", value)
            else:
                slos[name] = value
        return {**data, "slos": slos, "relative_slos": relative}

    @field_validator("slos", "relative_slos")
    @classmethod
    def _known_slos(cls, value: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        factor = info.field_name == "relative_slos"
        for name, bound in value.items():
            if name not in METRIC_NAMES:
                raise ValueError(f"unknown SLO metric {name!r}; known: {', '.join(METRIC_NAMES)}")
            if not 0 < bound <= (MAX_FACTOR if factor else math.inf) or math.isinf(bound):
                what = f"baseline*{bound:g}: a factor" if factor else f"{bound:g}: a bound"
                raise ValueError(f"SLO {name}={what} must be a finite number > 0")
        return value

    @field_validator("root", "model", "storage")
    @classmethod
    def _a_path(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and (problem := path_field_problem(str(info.field_name), value)):
            raise ValueError(problem)  # before anything is made under it
        return value

    @field_validator("workload", mode="before")
    @classmethod
    def _parse_workload(cls, value: Any) -> Any:
        return parse_workload(value) if isinstance(value, str | dict) else value

    @field_validator("parallel")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= MAX_PARALLEL:
            raise ValueError(f"expected a number from 1 to {MAX_PARALLEL}, or auto")
        return value
