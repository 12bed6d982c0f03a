"""What makes a search space well-formed as a whole, beyond each parameter's own checks: no
two parameters (or names, env variables) driving one option; `only_if` naming other
parameters by values they can take, without a cycle; nothing both fixed and tuned; known vLLM
options (with the nearest spelling offered); a variant's choices named in `variants`, whose
options are neither tuned nor fixed; option ranges vLLM accepts. Each check returns `(path,
message)` issues for the whole space; `SearchSpace` raises the first with a count of the
rest."""

from __future__ import annotations

from typing import Any, Protocol

from autotune.engine import is_known_option, suggest_option
from autotune.space._bounds import fixed_range_issues, range_issues
from autotune.space._params import CategoricalParam, Issue, Parameter, format_value


class WholeSpace(Protocol):
    """What the checks read of a space (`space._space.SearchSpace`, which runs them)."""

    fixed: dict[str, Any]
    env: dict[str, str]
    variants: dict[str, dict[str, Any]]
    parameters: list[Parameter]
    allow_unknown_options: bool


def _param_path(i: int, field: str) -> str:
    return f"parameters[{i}].{field}"


def _target_field(param: Parameter) -> str:
    return "option" if param.option is not None else "name"


def _parameter_issues(space: WholeSpace) -> list[Issue]:
    return [
        (_param_path(i, field), message)
        for i, param in enumerate(space.parameters)
        for field, message in param.issues()
    ]


def _duplicate_issues(space: WholeSpace) -> list[Issue]:
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


def _only_if_issues(space: WholeSpace) -> list[Issue]:
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


def _fixed_conflict_issues(space: WholeSpace) -> list[Issue]:
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


def _unknown_option_issues(space: WholeSpace) -> list[Issue]:
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


def _variant_issues(space: WholeSpace) -> list[Issue]:
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


def _option_range_issues(space: WholeSpace) -> list[Issue]:
    return range_issues(space.parameters) + fixed_range_issues(space.fixed, space.variants)


# Data, not an if-chain: each check returns (path, message) issues for the whole space.
SPACE_CHECKS = (
    _parameter_issues,
    _option_range_issues,
    _duplicate_issues,
    _only_if_issues,
    _fixed_conflict_issues,
    _unknown_option_issues,
    _variant_issues,
)
