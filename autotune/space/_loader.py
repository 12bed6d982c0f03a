"""Reading search-space files: YAML -> validated `SearchSpace`, every failure one `SpaceError`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from autotune.space._errors import SpaceError
from autotune.space._params import PARAMETER_TYPES
from autotune.space._space import SearchSpace

# The shipped spaces are package data (`search_spaces/` at the repository root links here).
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "search_spaces"


def list_spaces() -> list[Path]:
    """The shipped search-space files, sorted by name."""
    return sorted(SHIPPED_DIR.glob("*.yaml"))


def load_space(path: str | Path) -> SearchSpace:
    """Load and validate a search space from a file, or a shipped one by name (`cpu`)."""
    file = _resolve(path)
    data = _read_yaml(file)
    data.setdefault("name", file.stem)
    try:
        space = SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(f"{file}: {_describe_error(exc.errors()[0])}") from exc
    space._source = file
    return space


def _resolve(path: str | Path) -> Path:
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
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpaceError(f"{file}: {where}YAML syntax error: {exc.problem}") from exc
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpaceError(f"{file}: cannot read: {first_line}") from exc
    if not isinstance(data, dict):
        raise SpaceError(f"{file}: expected a mapping at the top level")
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
    message = error["msg"].removeprefix("Value error, ")
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
