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

from autotune.engine import env_name_problem, is_known_option, normalize_option, suggest_option
from autotune.space._bounds import fixed_range_issues, range_issues
from autotune.space._defaults import mark_defaults
from autotune.space._derived import resolve
from autotune.space._errors import SpaceError
from autotune.space._params import (
    BoolParam,
    CategoricalParam,
    Issue,
    Parameter,
    env_string,
    format_value,
)

Platform = Literal["cpu", "cuda", "ascend", "any"]


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
    platform: Platform = Field(default="any", description="Where the space applies")
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
        issues = [issue for check in _SPACE_CHECKS for issue in check(self)]
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


def _param_path(i: int, field: str) -> str:
    return f"parameters[{i}].{field}"


def _target_field(param: Parameter) -> str:
    return "option" if param.option is not None else "name"


def _parameter_issues(space: SearchSpace) -> list[Issue]:
    return [
        (_param_path(i, field), message)
        for i, param in enumerate(space.parameters)
        for field, message in param.issues()
    ]


def _duplicate_issues(space: SearchSpace) -> list[Issue]:
    issues: list[Issue] = []
    seen: dict[tuple[str, str], int] = {}
    paths: dict[tuple[str, ...], int] = {}
    for i, p in enumerate(space.parameters):
        keys = [("name", p.name), ("env", p.env)]
        for kind, value in keys:
            if value is None:
                continue
            if (kind, value) in seen:
                field = _target_field(p) if kind == "option" else kind
                first = seen[(kind, value)]
                issues.append(
                    (
                        _param_path(i, field),
                        f"{kind} '{value}' is already used by parameters[{first}]",
                    )
                )
            seen.setdefault((kind, value), i)
        path = p.option_path if p.target_option is not None else ()
        # Keys of one dict option may be tuned apart; a key and the dict above it may not.
        clash = next((j for q, j in paths.items() if path and _nested(path, q)), None)
        if clash is not None:
            message = f"option '{'.'.join(path)}' is already used by parameters[{clash}]"
            issues.append((_param_path(i, _target_field(p)), message))
        elif path:
            paths[path] = i
    return issues


def _nested(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """One option path is the other or lies inside it."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _only_if_issues(space: SearchSpace) -> list[Issue]:
    """`only_if` names other parameters of the space, by values they can take."""
    by_name = {p.name: p for p in space.parameters}
    issues: list[Issue] = []
    for i, p in enumerate(space.parameters):
        for name, values in (p.only_if or {}).items():
            other = by_name.get(name)
            if other is None or other is p:
                issues.append((_param_path(i, "only_if"), f"no other parameter named '{name}'"))
                continue
            cycle = _cycle_from(p.name, by_name)
            if cycle:
                message = f"only_if goes round in a cycle: {' -> '.join(cycle)}"
                issues.append((_param_path(i, "only_if"), message))
                return issues
            wrong = [v for v in values if not other.contains(v)]
            if not values:
                issues.append((_param_path(i, "only_if"), f"no value of '{name}' is listed"))
            elif wrong:
                message = f"'{name}' cannot be {format_value(wrong[0])}"
                issues.append((_param_path(i, "only_if"), message))
    return issues


def _cycle_from(start: str, by_name: dict[str, Parameter]) -> list[str]:
    """The names of an `only_if` cycle through `start` (`[a, b, a]`), or []."""
    path = [start]

    def walk(name: str) -> bool:
        for dep in (by_name[name].only_if or {}) if name in by_name else {}:
            if dep == start:
                path.append(dep)
                return True
            if dep not in path and dep in by_name:
                path.append(dep)
                if walk(dep):
                    return True
                path.pop()
        return False

    return path if walk(start) else []


def _fixed_conflict_issues(space: SearchSpace) -> list[Issue]:
    issues: list[Issue] = []
    for i, p in enumerate(space.parameters):
        if p.target_option is not None and p.target_option in space.fixed:
            issues.append(
                (
                    _param_path(i, _target_field(p)),
                    f"option '{p.target_option}' is both fixed and tuned",
                )
            )
        if p.env is not None and p.env in space.env:
            issues.append((_param_path(i, "env"), f"env '{p.env}' is both fixed and tuned"))
    return issues


def _unknown_option_issues(space: SearchSpace) -> list[Issue]:
    if space.allow_unknown_options:
        return []
    named = [(f"fixed.{k}", k) for k in space.fixed]
    named += [
        (_param_path(i, _target_field(p)), p.target_option)
        for i, p in enumerate(space.parameters)
        if p.target_option is not None
    ]
    named += [(f"variants.{v}.{k}", k) for v, o in space.variants.items() for k in o]
    issues: list[Issue] = []
    for path, option in named:
        if option is not None and not is_known_option(option):
            hint = suggest_option(option)
            did_you_mean = f" (did you mean '{hint}'?)" if hint else ""
            issues.append(
                (
                    path,
                    f"unknown vLLM option '{option}'{did_you_mean}; "
                    "set allow_unknown_options: true to pass it anyway",
                )
            )
    return issues


def _variant_issues(space: SearchSpace) -> list[Issue]:
    chooser = [
        (i, p)
        for i, p in enumerate(space.parameters)
        if isinstance(p, CategoricalParam) and p.variants
    ]
    issues: list[Issue] = []
    if len(chooser) > 1:
        issues.append((_param_path(chooser[1][0], "variants"), "only one variants parameter"))
    tuned = {p.target_option: i for i, p in enumerate(space.parameters) if p.target_option}
    for i, p in chooser:
        for k, choice in enumerate(p.choices):
            if choice not in space.variants:
                known = ", ".join(space.variants) or "none defined"
                issues.append(
                    (
                        _param_path(i, f"choices[{k}]"),
                        f"unknown variant '{choice}' (variants: {known})",
                    )
                )
    for name, overrides in space.variants.items():
        for key in overrides:
            if key in tuned:
                issues.append(
                    (
                        f"variants.{name}.{key}",
                        f"option '{key}' is also tuned by parameters[{tuned[key]}]",
                    )
                )
            elif key in space.fixed:
                issues.append((f"variants.{name}.{key}", f"option '{key}' is also fixed"))
    return issues


def _option_range_issues(space: SearchSpace) -> list[Issue]:
    return range_issues(space.parameters) + fixed_range_issues(space.fixed, space.variants)


# Data, not an if-chain: each check returns (path, message) issues for the whole space.
_SPACE_CHECKS = (
    _parameter_issues,
    _option_range_issues,
    _duplicate_issues,
    _only_if_issues,
    _fixed_conflict_issues,
    _unknown_option_issues,
    _variant_issues,
)
