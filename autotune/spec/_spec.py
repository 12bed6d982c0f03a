"""TuneSpec: everything a tuning study needs, validated once at the edge.

Built from an optional `--spec tune.yaml` with the CLI's flags laid over it (flags win): its
fields each checked alone (`_fields`), then what they ask of each other (`_implied`). Nothing
below the CLI parses strings or reads the environment: it receives a TuneSpec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError, model_validator

from autotune.bench import CapacitySearch, LoadProfile
from autotune.spec._engine import EngineSpec
from autotune.spec._errors import SpecError, describe_spec_error
from autotune.spec._fields import SpecFields
from autotune.spec._file import read_spec_file
from autotune.spec._implied import RULES
from autotune.store import default_storage_url


class TuneSpec(SpecFields):
    """A tuning study: model, workload, load, objectives, SLOs, search space, budget, storage.
    Frozen: built once by the CLI (flags over a spec file) and read below it; what a study
    fixes as it runs (the bounds its baseline sets) is the study's (`study._slos`)."""

    def _complete(self, name: str, value: Any) -> None:
        """Set field `name` while the spec is validated (what a scenario implies): once built,
        the spec is frozen."""
        object.__setattr__(self, name, value)

    @model_validator(mode="after")
    def _consistent(self) -> TuneSpec:
        """What the fields ask of each other, in order (`_implied.RULES`): refused, or
        completed (what a scenario, a trace or a capacity search implies)."""
        for rule in RULES:
            rule(self, self._complete)
        return self

    def shared(self) -> dict[str, Any]:
        """The fields every worker of the study uses alike (kept in the store, so that
        `autotune worker` needs only the study's name); the rest are this machine's."""
        local = {"storage", "root", "parallel", "devices", "reingest"}
        data: dict[str, Any] = self.model_dump(mode="json", exclude=local)
        data["engine"].pop("cores", None)
        return data

    @property
    def study_dir(self) -> Path:
        return self.root / self.study

    @property
    def storage_url(self) -> str:
        """The storage URL; by default `studies/<name>/study.db` beside the trial folders."""
        return self.storage or default_storage_url(self.root, self.study)

    @property
    def api_model_name(self) -> str:
        return self.served_model_name or Path(self.model).name or self.model


def load_spec(
    path: Path | None, overrides: dict[str, Any], defaults: dict[str, Any] | None = None
) -> TuneSpec:
    """The spec from `path` (if any) with `overrides` (non-None flag values) laid over it;
    `defaults` fill the fields that neither names (e.g. the model of `--baseline`)."""
    data: dict[str, Any] = dict(defaults or {})
    if path is not None:
        data.update(read_spec_file(path))
    for key, value in overrides.items():
        if value is None:
            continue
        if key in ("load", "engine") and isinstance(value, dict):
            # Field by field: `--rate` keeps the file's `load.seed` and `request_timeout_s`.
            base = data.get(key) or {}
            value = {**base, **{k: v for k, v in value.items() if v is not None}}
        data[key] = value
    try:
        return TuneSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_first_error(exc, path, overrides)) from None


def _first_error(exc: ValidationError, path: Path | None, flags: dict[str, Any]) -> str:
    """The first error in plain words, named by its flag or its field (see _errors)."""
    parts: dict[str, type[BaseModel]] = {
        "": TuneSpec,
        "load": LoadProfile,
        "engine": EngineSpec,
        "capacity": CapacitySearch,
    }
    return describe_spec_error(exc, path, flags, parts)
