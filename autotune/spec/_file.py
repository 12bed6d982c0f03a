"""The `--spec` file read as the user wrote it: a bounded read, strict YAML, a mapping of
fields; and the spec's paths checked before anything is created from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autotune.inputs.userfiles import (
    MIB,
    UserFileError,
    folder_problem,
    path_problem,
    read_user_text,
)
from autotune.inputs.yamlfile import load_yaml, yaml_problem
from autotune.spec._errors import SpecError

# A spec is a few dozen lines; a larger file is not one (and `/dev/zero` never ends).
SPEC_LIMIT = 1 * MIB


def read_spec_file(path: Path) -> dict[str, Any]:
    """The fields of the spec file `path`; SpecError in one line when it is not one."""
    try:
        data = load_yaml(read_user_text(path, SPEC_LIMIT, "spec"))
    except UserFileError as exc:
        raise SpecError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise SpecError(yaml_problem(path, exc)) from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a spec must be a mapping of fields")
    if "parameters" in data and "study" not in data:
        raise SpecError(f"{path}: a search space (it has `parameters`): pass it as --space")
    return data


# An offline trial runs `engine.offline_command`: a batch program given `--config`, `--prompts`
# and `--out` that writes its result file. A server command (`--engine-command`, given `--host`
# and `--port`, serving HTTP until stopped) cannot be run in its place, so the combination is
# refused rather than silently replaced by the local vLLM.
OFFLINE_ENGINE_COMMAND = (
    "--engine-command (engine.command) starts a server, which an offline trial does not run: "
    "its batch program is engine.offline_command (given --config, --prompts and --out); set "
    "that in the --spec file"
)


def path_field_problem(field: str, value: str | Path) -> str | None:
    """Why the spec's `root` (a folder), `model` (a path or a hub name) or `storage` (a URL;
    a SQLite file's path) cannot be used, before anything is made from it."""
    if field == "root":
        return folder_problem(value)
    if field == "storage":
        return in_memory_problem(str(value)) or storage_problem(str(value))
    return path_problem(value)


def in_memory_problem(url: str) -> str | None:
    """Why a study cannot be kept in an in-memory SQLite database (`sqlite://`,
    `sqlite:///:memory:`): it is gone when the command ends, its trials with it, and no other
    command or worker can open it."""
    if not url.startswith("sqlite:"):
        return None
    rest = url.split(":", 1)[1].removeprefix("///").removeprefix("//")
    path, _, query = rest.partition("?")
    if path not in ("", ":memory:") and "mode=memory" not in query:
        return None
    return (
        "an in-memory database is gone when the command ends, and the study with it; give a "
        "file (sqlite:///path/study.db), or leave --storage out for ROOT/STUDY/study.db"
    )


def storage_problem(url: str) -> str | None:
    """Why a SQLite URL's file cannot be made: its path as a path (other URLs are the
    store's to judge)."""
    if not url.startswith("sqlite:"):
        return None
    rest = url.split(":", 1)[1].removeprefix("///")
    path = rest.split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return folder_problem(Path(path).parent) or path_problem(path)
