"""The search space: a validated file turned into Optuna distributions and engine configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from optuna.distributions import BaseDistribution
from optuna.trial import BaseTrial
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    field_validator,
    model_validator,
)

from autotune.engine import env_name_problem, normalize_option
from autotune.space._checks import SPACE_CHECKS
from autotune.space._defaults import mark_defaults
from autotune.space._derived import resolve
from autotune.space._errors import SpaceError
from autotune.space._params import (
    BoolParam,
    CategoricalParam,
    Parameter,
    env_string,
    format_value,
)

SpacePlatform = Literal["cpu", "cuda", "ascend", "any"]


def _normalized_keys(mapping: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = normalize_option(key)
        if name in out:
            raise ValueError(f"{where}.{key}: option '{name}' is given twice")
        out[name] = value
    return out


class SearchSpace(BaseModel):
    """A vLLM search space: fixed options, fixed env vars and the tuned parameters.

    Build it with `load_space`; a directly constructed one is validated the same way.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Short name (defaults to the file's stem)")
    description: str | None = Field(default=None, description="One line for humans")
    platform: SpacePlatform = Field(default="any", description="Where the space applies")
    allow_unknown_options: StrictBool = Field(
        default=False, description="Accept option names that vLLM 0.32 does not know"
    )
    fixed: dict[str, Any] = Field(default_factory=dict, description="Options always passed")
    env: dict[str, str] = Field(default_factory=dict, description="Env vars always set")
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Named option overrides chosen by a variants parameter"
    )
    parameters: list[Parameter] = Field(min_length=1, description="The tuned parameters")

    _source: Path | None = PrivateAttr(default=None)

    @field_validator("fixed")
    @classmethod
    def _normalize_fixed(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _normalized_keys(value, "fixed")

    @field_validator("variants")
    @classmethod
    def _normalize_variants(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {k: _normalized_keys(v, f"variants.{k}") for k, v in value.items()}

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        for name in value:
            if (problem := env_name_problem(str(name))) is not None:
                raise ValueError(problem)
        return {
            k: env_string(v) if isinstance(v, bool | int | float) else v for k, v in value.items()
        }

    @model_validator(mode="before")
    @classmethod
    def _vllm_defaults(cls, data: Any) -> Any:
        return mark_defaults(data)  # `baseline: vllm_default` (space/_defaults.py)

    @model_validator(mode="after")
    def _check(self) -> SearchSpace:
        issues = [issue for check in SPACE_CHECKS for issue in check(self)]
        if issues:
            path, message = issues[0]
            more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
            raise ValueError(f"{path}: {message}{more}")
        return self

    @property
    def source(self) -> Path | None:
        """The file the space was loaded from, if any."""
        return self._source

    @property
    def label(self) -> str:
        return str(self._source) if self._source is not None else self.name

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna distributions by parameter name (bool -> Categorical([False, True]))."""
        return {p.name: p.distribution() for p in self.parameters}

    def baseline_params(self) -> dict[str, Any]:
        """The parameters of trial 0 (enqueue them first)."""
        return {p.name: p.baseline_value() for p in self.parameters}

    def suggest(self, trial: BaseTrial) -> dict[str, Any]:
        """Ask the trial for a value of every parameter."""
        return {p.name: p.suggest(trial) for p in self.parameters}

    def to_engine(self, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """(vLLM options, env vars) for parameter values, `fixed` and `env` included.

        Scale is applied; null values and "" env values are left out; `{cores}` stays for the
        launcher to resolve. A variant may set `model`, which replaces the tuned model.
        """
        self._check_params(params)
        options = dict(self.fixed)
        env = dict(self.env)
        derived: list[tuple[tuple[str, ...], str]] = []
        active = self.active_names(params)
        for param in self.parameters:
            value = params[param.name]
            if param.name not in active:
                continue
            if isinstance(param, CategoricalParam) and param.variants:
                _apply_overrides(options, self.variants[value])
            elif param.env is not None:
                text = env_string(param.engine_value(value))
                if text is not None:
                    env[param.env] = text
            elif value is not None:
                target = param.target_option or param.name
                _merge(options, target, param.engine_value(value))
                if isinstance(param, CategoricalParam) and value in param.derived:
                    derived.append((param.option_path, value))
        for path, name in derived:  # from the other options, once all are in
            resolve(options, path, name)
        return options, env

    def active_names(self, params: dict[str, Any]) -> set[str]:
        """The parameters set for `params` (`only_if`), judged on what the engine gets: a
        parameter whose condition names one that is itself not set sees that one at its
        baseline, as `effective` does. (Validation refuses `only_if` cycles.)"""
        seen: dict[str, Any] = {}  # name -> its effective value, once decided
        active: set[str] = set()
        pending = [p for p in self.parameters if p.name in params]
        while pending:
            left = []
            for p in pending:
                needs = p.only_if or {}
                if any(k not in seen and k in params for k in needs):
                    left.append(p)
                    continue
                if all(seen.get(k, params.get(k)) in values for k, values in needs.items()):
                    active.add(p.name)
                seen[p.name] = params[p.name] if p.name in active else p.baseline_value()
            if len(left) == len(pending):  # a cycle (refused by validation): as written
                active |= {p.name for p in left if p.active(params)}
                break
            pending = left
        return active

    def effective(self, params: dict[str, Any]) -> dict[str, Any]:
        """`params` with every parameter that is not set for them (`only_if`) at its baseline:
        two proposals that differ only there launch the same engine."""
        active = self.active_names(params)
        return {
            p.name: params[p.name] if p.name in active else p.baseline_value()
            for p in self.parameters
            if p.name in params
        }

    def params_from_engine(
        self, options: dict[str, Any], env: dict[str, str]
    ) -> tuple[dict[str, Any], set[str], set[str]]:
        """The parameter values that launch `options` and `env` (the inverse of `to_engine`),
        with the option and variable names they account for.

        A parameter whose option or variable is absent takes its baseline value (vLLM's
        default, or the space's stand-in for it); a variant parameter always does. A value the
        parameter cannot take raises SpaceError naming it.
        """
        params: dict[str, Any] = {}
        used_options: set[str] = set()
        used_env: set[str] = set()
        for param in self.parameters:
            params[param.name] = param.baseline_value()
            if isinstance(param, CategoricalParam) and param.variants:
                continue
            if param.env is not None:
                found = self._env_value(param, env)
                if found is not _ABSENT:
                    params[param.name] = found
                used_env.add(param.env)
                continue
            target = param.target_option or param.name
            value = _dig(options, (target, *param.option_path[1:]))
            used_options.add(target)
            if value is _ABSENT:
                continue
            if param.scale is not None and isinstance(value, int | float):
                if value % param.scale:
                    raise SpaceError(
                        f"{self.label}: {target}={value} is not a multiple of the scale "
                        f"{param.scale} of parameter {param.name}"
                    )
                value = int(value // param.scale)
            if not param.contains(value):
                raise SpaceError(
                    f"{self.label}: {target}={format_value(value)} is not a value parameter "
                    f"{param.name} can take; widen the space or change the command"
                )
            params[param.name] = value
        return params, used_options, used_env

    def _env_value(self, param: Parameter, env: dict[str, str]) -> Any:
        """The value of `param` whose variable text is `env[param.env]` (absent: the value
        that leaves it unset, if any)."""
        assert param.env is not None
        text = env.get(param.env)
        if isinstance(param, CategoricalParam):
            candidates: list[Any] = list(param.choices)
        elif isinstance(param, BoolParam):
            candidates = [False, True]
        else:
            candidates = [] if text is None else [yaml.safe_load(text)]
        for candidate in candidates:
            if param.contains(candidate) and env_string(param.engine_value(candidate)) == text:
                return candidate
        if text is None:
            return _ABSENT
        raise SpaceError(
            f"{self.label}: {param.env}={text} is not a value parameter {param.name} can take"
        )

    def describe(self, params: dict[str, Any]) -> str:
        """A one-line human form: `max_num_seqs=64 kv_cache_mib=1024 ...`; a parameter not
        set for `params` (`only_if`) is left out: the label is what the engine gets."""
        inactive = set(self.names) - self.active_names(params)
        order = self.names + [k for k in params if k not in self.names]
        shown = [k for k in order if k in params and k not in inactive]
        return " ".join(f"{k}={format_value(params[k])}" for k in shown)

    def _check_params(self, params: dict[str, Any]) -> None:
        missing = [n for n in self.names if n not in params]
        unknown = [k for k in params if k not in self.names]
        if missing or unknown:
            what = "missing " + ", ".join(missing) if missing else "unknown " + ", ".join(unknown)
            raise SpaceError(f"{self.label}: params: {what}")
        for param in self.parameters:
            if not param.contains(params[param.name]):
                value = format_value(params[param.name])
                raise SpaceError(f"{self.label}: params.{param.name}: invalid value {value}")


_ABSENT: Any = object()


def _dig(options: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = options
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return _ABSENT
        value = value[key]
    return value


def _merge(options: dict[str, Any], key: str, value: Any) -> None:
    """Set `options[key]`; dicts (the keys of a dotted option) are merged, not replaced."""
    current = options.get(key)
    if isinstance(current, dict) and isinstance(value, dict):
        merged = dict(current)
        for k, v in value.items():
            _merge(merged, k, v)
        options[key] = merged
    else:
        options[key] = value


def _apply_overrides(options: dict[str, Any], overrides: dict[str, Any]) -> None:
    for key, value in overrides.items():
        if value is None:
            options.pop(key, None)
        else:
            options[key] = value
