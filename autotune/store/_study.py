"""What a study keeps about itself (Optuna's study user attributes): one typed record.

`StudyFacts.read` is the one reader of a study's attributes and `write_study` the one writer;
every other module reads a field, never a string key. The stored key names are the fields'
names, as earlier versions wrote them, so an old study reads as it was. A value is read
leniently (as `TrialFacts`): a field an older version did not write keeps its default, one that
no longer parses is left out rather than failing the reader of a whole study.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import optuna
from pydantic import BaseModel, ConfigDict, Field

from autotune.store._facts import read_lenient
from autotune.vocab.platform import AnyPlatform
from autotune.vocab.slo import Slo, slos_of

if TYPE_CHECKING:
    from optuna.study._frozen import FrozenStudy  # what `get_all_studies` lists


class StoredObjective(BaseModel):
    """One objective the study optimizes."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    metric: str
    direction: str = Field(description="maximize or minimize")


class SloBasis(BaseModel):
    """What a baseline-relative SLO bound was fixed from: `factor x baseline`."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    factor: float = Field(description="the user's factor (`--slo NAME=baseline*FACTOR`)")
    baseline: float = Field(description="the baseline's measured value of the metric")
    trial: int | None = Field(default=None, description="the baseline trial that measured it")


class AgreementReference(BaseModel):
    """With --min-agreement: the baseline's greedy outputs every other trial is compared with."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    trial: int | None = Field(default=None, description="the baseline trial that answered")
    outputs: list[Any] = Field(default_factory=list, description="its greedy outputs")


class StudyFacts(BaseModel):
    """A study's attributes: the experiment it runs (compared on resume), where it ran, what
    its baseline fixed, and the confirm step's result. None or empty: not stored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    # The experiment (`Harness.experiment`): a study continues only with the same values.
    model: str | None = Field(default=None, description="the model tuned (a path or hub name)")
    space: str | None = Field(default=None, description="the search space's name")
    workload: dict[str, Any] | None = Field(default=None, description="the workload, as stored")
    load: dict[str, Any] | None = Field(default=None, description="the load profile, as stored")
    slos: dict[str, float] = Field(
        default_factory=dict,
        description="every absolute SLO bound, metric -> value: the spec's, and each "
        "baseline-relative one once the baseline fixed it (see `slo_basis`)",
    )
    relative_slos: dict[str, float] = Field(
        default_factory=dict, description="baseline-relative SLOs: metric -> factor"
    )
    max_error_rate: float | None = Field(default=None, description="the error-rate bound")
    capacity: dict[str, Any] | None = Field(
        default=None, description="the capacity search (`--load capacity`); None: a fixed load"
    )
    scenario: str | None = Field(default=None, description="online or offline")
    # How the study was opened.
    served_model_name: str | None = Field(default=None, description="the name the API serves")
    platform: AnyPlatform | None = Field(default=None, description="cpu, cuda, ascend or any")
    objectives: list[StoredObjective] = Field(
        default_factory=list, description="what the study optimizes; empty: the defaults"
    )
    search: str | None = Field(default=None, description="pareto or single (`--search`)")
    host: dict[str, Any] | None = Field(default=None, description="the host it was created on")
    baseline_defaults: str | None = Field(
        default=None, description="vLLM's batch defaults on this device, in words"
    )
    created: str | None = Field(default=None, description="when (ISO 8601, UTC)")
    spec: dict[str, Any] | None = Field(
        default=None, description="`TuneSpec.shared()`: the spec `autotune worker` runs"
    )
    # What the study found.
    slo_basis: dict[str, SloBasis] = Field(
        default_factory=dict, description="what each baseline-relative bound was fixed from"
    )
    agreement_reference: AgreementReference | None = Field(
        default=None, description="--min-agreement: the baseline's greedy outputs"
    )
    confirm: dict[str, Any] | None = Field(
        default=None, description="the confirm step's result (`autotune.study._confirm`)"
    )

    @classmethod
    def read(cls, stored: Any) -> StudyFacts:
        """A study's stored attributes (a dict; facts already read are returned as they are)."""
        if isinstance(stored, StudyFacts):
            return stored
        return read_lenient(cls, stored)

    @classmethod
    def of(cls, study: optuna.Study | FrozenStudy) -> StudyFacts:
        """The facts of an Optuna study (open, or as listed)."""
        return cls.read(study.user_attrs)

    def stored(self) -> dict[str, Any]:
        """The attributes as stored: exactly the keys that were read (or written)."""
        return self.model_dump(mode="json", exclude_unset=True)

    @property
    def all_slos(self) -> tuple[Slo, ...]:
        """Every SLO: the absolute ones, the relative ones (fixed, with the baseline value
        that fixed them, or still pending)."""
        fixed = {k: v for k, v in self.slo_basis.items() if k in self.slos}
        factors = {**self.relative_slos, **{k: v.factor for k, v in fixed.items()}}
        return slos_of(self.slos, factors, {k: v.baseline for k, v in fixed.items()})

    @property
    def confirmed_winner(self) -> int | None:
        """The trial the finished confirm step chose, if the study has one."""
        confirm = self.confirm
        if confirm is None or "finished" not in confirm:
            return None
        winner = confirm.get("winner")
        return int(winner) if isinstance(winner, int) else None


def write_study(study: optuna.Study, **fields: Any) -> None:
    """Keep `fields` (names of `StudyFacts`, values it validates) with `study`."""
    unknown = sorted(set(fields) - set(StudyFacts.model_fields))
    if unknown:
        raise ValueError(f"not a study fact: {', '.join(unknown)}")
    checked = StudyFacts.model_validate(json.loads(json.dumps(fields, default=_jsonable)))
    for key, value in checked.model_dump(mode="json", include=set(fields)).items():
        study.set_user_attr(key, value)


def _jsonable(value: Any) -> Any:
    """A value as it reads back from the storage (JSON types only; a model as its fields)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)
