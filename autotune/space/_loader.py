"""Reading search-space files: YAML -> validated `SearchSpace`, every failure one `SpaceError`.

What depends on the machine, not the file, is checked here at the edge: option values the
installed vllm-ascend lacks, and (with `host`) values the host cannot run (`_host.py`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from autotune.engine import ascend_option_problems, installed_ascend_version
from autotune.inputs.userfiles import MIB, UserFileError, path_problem, read_user_text, shown_path
from autotune.inputs.wording import plain_message
from autotune.inputs.yamlfile import load_yaml, yaml_problem
from autotune.space._errors import SpaceError
from autotune.space._host import HostFacts, restrict_to_host
from autotune.space._params import PARAMETER_TYPES, CategoricalParam, Issue
from autotune.space._space import SearchSpace
from autotune.vocab.platform import Platform

# The shipped spaces are package data (`search_spaces/` at the repository root links here).
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "search_spaces"
# The shipped spaces are a few KiB; a larger file is not a space (and `/dev/zero` never ends).
SPACE_LIMIT = 1 * MIB

logger = logging.getLogger(__name__)


def list_spaces() -> list[Path]:
    """The shipped search-space files, sorted by name."""
    return sorted(SHIPPED_DIR.glob("*.yaml"))


def load_space(path: str | Path, host: HostFacts | None = None) -> SearchSpace:
    """Load and validate a search space from a file, or a shipped one by name (`cpu`).

    With `host` (what this host can run, read once at the edge), values it cannot run are
    dropped, one warning per parameter saying so (see `restrict_to_host`).
    """
    space = _load(path)
    if host is None:
        return space
    space, notes = restrict_to_host(space, host)
    for note in notes:
        logger.warning("%s", note)
    return space


def _load(path: str | Path) -> SearchSpace:
    file = _resolve(path)
    data = _read_yaml(file)
    data.setdefault("name", file.stem)
    try:
        space = SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(f"{file}: {_describe_error(exc.errors()[0])}") from exc
    if space.platform == Platform.ASCEND:
        _check_installed_ascend(space, file)
    space._source = file
    return space


def _check_installed_ascend(space: SearchSpace, file: Path) -> None:
    """Refuse a space that names graph options the installed vllm-ascend lacks.

    This depends on the machine, not on the file, so it runs here at the edge rather than in
    the space's own validation; without vllm-ascend only unknown graph modes are refused.
    """
    issues = _ascend_space_issues(space, installed_ascend_version())
    if issues:
        path, message = issues[0]
        more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
        raise SpaceError(f"{file}: {path}: {message}{more}")


def _ascend_space_issues(space: SearchSpace, version: str | None) -> list[Issue]:
    """Every option value the space can produce, checked against vllm-ascend `version`.

    Fixed options and variants are named down to the nested key (`fixed.additional_config.
    torchair_graph_config`); a parameter by the choice that sets the value.
    """
    issues = [
        (f"fixed.{path}", message) for path, message in ascend_option_problems(space.fixed, version)
    ]
    # A variant or a categorical choice the installed version lacks is dropped before a
    # study (`_host.restrict_to_host`, with one line); only an unknown mode is refused here.
    issues += [
        (f"variants.{name}.{path}", message)
        for name, options in space.variants.items()
        for path, message in ascend_option_problems(options, None)
    ]
    for field, options, choice in _parameter_sources(space):
        gated = None if choice else version
        issues += [(field, message) for _, message in ascend_option_problems(options, gated)]
    return issues


def _parameter_sources(space: SearchSpace) -> list[tuple[str, dict[str, Any], bool]]:
    """(field path, options, whether it is a categorical choice) for each value a parameter
    can set; ranges by their baseline."""
    sources: list[tuple[str, dict[str, Any], bool]] = []
    for i, param in enumerate(space.parameters):
        option = param.target_option
        if option is None:
            continue  # env vars and variants (checked as `variants.*`)
        choice = isinstance(param, CategoricalParam)
        if isinstance(param, CategoricalParam):
            values = [(f"choices[{k}]", c) for k, c in enumerate(param.choices)]
        else:  # the gated options are named by their keys, whatever a bool or number says
            values = [("option" if param.option else "name", param.baseline_value())]
        sources += [
            (f"parameters[{i}].{field}", {option: param.engine_value(value)}, choice)
            for field, value in values
            if value is not None
        ]
    return sources


def _resolve(path: str | Path) -> Path:
    if (problem := path_problem(path)) is not None:
        raise SpaceError(f"{shown_path(path)}: {problem}")
    file = Path(path)
    if file.is_file():
        return file
    is_bare_name = isinstance(path, str) and file.suffix == "" and len(file.parts) == 1
    if is_bare_name:
        shipped = SHIPPED_DIR / f"{path}.yaml"
        if shipped.is_file():
            return _relative_to_cwd(shipped)
        names = ", ".join(p.stem for p in list_spaces()) or "none"
        raise SpaceError(f"{path}: no such file or shipped search space (shipped: {names})")
    if file.exists():
        raise SpaceError(f"{file}: not a file")
    raise SpaceError(f"{file}: file not found")


def _relative_to_cwd(path: Path) -> Path:
    """A shorter path for messages when the file lies under the working directory."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _read_yaml(file: Path) -> dict[str, Any]:
    try:
        data = load_yaml(read_user_text(file, SPACE_LIMIT, "search space"))
    except UserFileError as exc:
        raise SpaceError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise SpaceError(yaml_problem(file, exc)) from exc
    except OSError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpaceError(f"{file}: cannot read: {first_line}") from exc
    if not isinstance(data, dict):
        raise SpaceError(f"{file}: expected a mapping at the top level")
    if "parameters" not in data and {"study", "model"} & set(data):
        raise SpaceError(f"{file}: a tune spec (it has `study` or `model`): pass it as --spec")
    return data


def _loc_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for i, item in enumerate(loc):
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif i == 2 and loc[0] == "parameters" and item in PARAMETER_TYPES:
            continue  # the discriminator tag pydantic adds to the location
        else:
            parts.append(f".{item}" if parts else str(item))
    return "".join(parts)


def _describe_error(error: ErrorDetails) -> str:
    """One pydantic error as `field.path: message`."""
    path = _loc_path(error["loc"])
    message = plain_message(error)
    if error["type"] == "missing":
        message = "required field missing"
    elif error["type"] == "extra_forbidden":
        message = "unknown field"
    elif error["type"] == "union_tag_invalid":
        tag = error.get("ctx", {}).get("tag", "?")
        message = f"unknown type '{tag}' (expected one of: {', '.join(PARAMETER_TYPES)})"
    elif error["type"] == "union_tag_not_found":
        message = f"`type` is required (one of: {', '.join(PARAMETER_TYPES)})"
    if not path or message.startswith(path):
        return message
    return f"{path}: {message}"
