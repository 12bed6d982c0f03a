"""One place spells engine configs: as `vllm serve --config` YAML and as argv.

What a trial launches is produced here, and `export` writes the same YAML, so what was measured
is exactly what is exported.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from autotune.engine._config import EngineConfig
from autotune.engine._options import cli_flag, known_options, normalize_option, yaml_key

_IDENTITY_KEYS = ("model", "served_model_name")


def to_yaml_dict(config: EngineConfig) -> dict[str, Any]:
    """The `--config` mapping: model and served name first, then options in a stable order."""
    out: dict[str, Any] = {"model": config.model}
    if config.served_model_name:
        out["served-model-name"] = config.served_model_name
    for name in sorted(config.args):
        out[yaml_key(name)] = config.args[name]
    return out


def config_file_mapping(data: dict[str, Any]) -> dict[str, Any]:
    """A `to_yaml_dict` mapping as a `--config` file must spell it: a `false` switch as
    `no-KEY: true`.

    vLLM 0.32 turns `KEY: false` into `--no-KEY` only where the parser reading the file has that
    option (`FlexibleArgumentParser.load_config_file`). `vllm serve --config` reads the file
    with the top-level parser, which has no `--no-...` options of the `serve` subcommand: the
    `false` was dropped and the server ran vLLM's default (an export with
    `enable-prefix-caching: false` served with prefix caching on; seen in its log). `no-KEY:
    true` becomes `--no-KEY`, which both entry points take, as the argv path spells it.
    """
    out: dict[str, Any] = {}
    for key, value in data.items():
        if value is False and normalize_option(key) in known_options():
            out[f"no-{key}"] = True
        else:
            out[key] = value
    return out


def logical_option(key: str, value: Any) -> tuple[str, Any]:
    """One `--config` entry as (option name, value): `no-KEY: true` is `(KEY, False)`, the
    inverse of `config_file_mapping`."""
    name = normalize_option(key)
    if name.startswith("no_") and value is True and name[3:] in known_options():
        return name[3:], False
    return name, value


def to_yaml_text(config: EngineConfig, header: str = "", *, serve: bool = True) -> str:
    """YAML text for `vllm serve --config`, optionally after a comment header; `serve=False`:
    the plain mapping (the offline child reads it as `vllm.LLM` keyword arguments)."""
    mapping = to_yaml_dict(config)
    if serve:
        mapping = config_file_mapping(mapping)
    body = yaml.safe_dump(mapping, sort_keys=False, default_flow_style=False)
    lines = [f"# {line}".rstrip() for line in header.splitlines()] if header else []
    return "\n".join([*lines, body]) if lines else body


def from_yaml_dict(data: dict[str, Any], env: dict[str, str] | None = None) -> EngineConfig:
    """Read a `--config` mapping back into an EngineConfig (the inverse of `to_yaml_dict`;
    `no-KEY: true`, as `config_file_mapping` writes a false switch, is `KEY: false`)."""
    args = dict(logical_option(key, value) for key, value in data.items())
    model = args.pop("model", None)
    if not isinstance(model, str) or not model:
        raise ValueError("the engine config has no 'model'")
    served = args.pop("served_model_name", None)
    if isinstance(served, list):
        served = served[0] if served else None
    return EngineConfig(model=model, served_model_name=served, args=args, env=dict(env or {}))


def option_argv(name: str, value: Any) -> list[str]:
    """The argv for one option, following vLLM's `--config` rules.

    `true` -> `--flag`, `false` -> `--no-flag`, a list -> `--key v1 v2`, a dict -> JSON.
    """
    flag = cli_flag(name)
    if value is True:
        return [flag]
    if value is False:
        return ["--no-" + flag[2:]]
    if isinstance(value, list | tuple):
        return [flag, *(str(v) for v in value)]
    if isinstance(value, dict):
        return [flag, json.dumps(value, separators=(",", ":"))]
    return [flag, str(value)]


def to_argv(config: EngineConfig) -> list[str]:
    """The options of `config` as command-line arguments (without the program)."""
    argv = ["--model", config.model]
    if config.served_model_name:
        argv += ["--served-model-name", config.served_model_name]
    for name in sorted(config.args):
        if name in _IDENTITY_KEYS:
            continue
        argv += option_argv(name, config.args[name])
    return argv


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name_problem(name: str) -> str | None:
    """Why `name` cannot be an environment variable's name (None where it can): a process
    environment splits `A=B=C` at its first `=`, and a shell's `. FILE` runs a line it cannot
    read as an assignment."""
    if _ENV_NAME.fullmatch(name):
        return None
    return f"{name!r} is not a variable name (letters, digits and _, not starting with a digit)"


def env_file_text(env: dict[str, str]) -> str:
    """`KEY=VALUE` lines in shell quoting, for `set -a; . FILE; set +a` before the serve command."""
    return "".join(f"{key}={_quote(value)}\n" for key, value in sorted(env.items()))


def _quote(value: str) -> str:
    # `|` separates per-rank binds in VLLM_CPU_OMP_THREADS_BIND but is a pipe to the shell.
    safe = all(ch.isalnum() or ch in "-_.,:/=+@%" for ch in value)
    return value if safe and value else "'" + value.replace("'", "'\\''") + "'"
