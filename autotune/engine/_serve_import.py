"""Reading what a user runs today: a `vllm serve` script or a `--config` YAML, into options.

A script may hold comments, `export KEY=VALUE` lines, `KEY=VALUE` prefixes of the command,
line continuations, `vllm serve MODEL` or `python -m vllm.entrypoints.openai.api_server
--model MODEL`, `--flag value`, `--flag=value`, `--no-flag`, bare boolean flags, JSON values
(`--compilation-config '{"cudagraph_mode": "FULL"}'`), several values (`--cudagraph-capture-sizes
1 2 4`), the short forms vLLM knows (`-tp 2`, `-pp`, `-q`, `-dp`), and `--config FILE` (read, with
the command line taking precedence, as vLLM does). Values are typed as YAML reads them.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autotune.engine._args import logical_option
from autotune.engine._options import normalize_option
from autotune.inputs.userfiles import MIB, UserFileError, read_user_text

# A script or config of a few lines; a larger file is not one (and `/dev/zero` never ends).
SERVE_FILE_LIMIT = 1 * MIB
SHORT_FLAGS = {
    "-tp": "tensor_parallel_size",
    "-pp": "pipeline_parallel_size",
    "-dp": "data_parallel_size",
    "-q": "quantization",
}
# Options that take no value: a token after them is the next argument, not their value.
BOOLEAN_OPTIONS = frozenset(
    {
        "enforce_eager",
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "trust_remote_code",
        "disable_log_requests",
        "enable_log_requests",
        "disable_log_stats",
        "enable_expert_parallel",
        "async_scheduling",
        "enable_auto_tool_choice",
        "disable_custom_all_reduce",
        "disable_sliding_window",
        "disable_fastapi_docs",
        "disable_uvicorn_access_log",
        "skip_tokenizer_init",
        "enable_lora",
        "enable_sleep_mode",
    }
)
# Where the tuner decides, not the imported command.
LAUNCHER_OPTIONS = frozenset({"host", "port", "config"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PROGRAMS = ("vllm", "python", "python3")
_WRAPPERS = frozenset({"nohup", "exec", "env", "time"})
_CONTROL = frozenset({"&", "&&", ";", "|", "||"})
_REDIRECT = re.compile(r"^\d*(>>?|<)(&\d*)?")


class ServeImportError(ValueError):
    """The script or YAML cannot be read as a vLLM server command; one line for the user."""


@dataclass
class ServeCommand:
    """A server command as the tuner sees it: model, options (snake_case), environment."""

    model: str | None = None
    served_model_name: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def read_serve_file(path: Path) -> ServeCommand:
    """A `vllm serve` script (`.sh` or any text) or a `--config` YAML mapping."""
    text = _read(path)  # the caller names the file
    if path.suffix in (".yaml", ".yml"):
        return _from_mapping(_yaml_mapping(text, path), ServeCommand())
    return parse_serve_script(text, path.parent)


def _read(path: Path, where: str | None = None) -> str:
    """A script or config file, read with a bound on its size (`/dev/zero` never ends)."""
    try:
        return read_user_text(path, SERVE_FILE_LIMIT, "serve script or config")
    except UserFileError as exc:
        raise ServeImportError(f"{where}: {exc.reason}" if where else exc.reason) from None


def parse_serve_script(text: str, base: Path = Path(".")) -> ServeCommand:
    """The last `vllm serve` / api_server command of a shell script, with the environment
    that the script's exports and the command's own `KEY=VALUE` prefixes give it."""
    result = ServeCommand()
    found = False
    for line in _logical_lines(text):
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise ServeImportError(f"cannot split {line[:60]!r}: {exc}") from None
        if not words:
            continue
        if words[0] == "export":
            result.env.update(_assignments(words[1:], line))
            continue
        words = _until_control(words)
        prefix = 0
        while prefix < len(words) and _is_assignment(words[prefix]):
            prefix += 1
        command = words[prefix:]
        while command and command[0] in _WRAPPERS:
            command = command[1:]
        if not command:  # plain `KEY=VALUE` lines set shell variables, exported or not
            result.env.update(_assignments(words, line))
            continue
        args = _server_args(command)
        if args is None:
            continue
        found = True
        result = ServeCommand(env={**result.env, **_assignments(words[:prefix], line)})
        _parse_args(args, result, base)
    if not found:
        raise ServeImportError(
            "no vLLM server command found (expected `vllm serve MODEL ...` or "
            "`python -m vllm.entrypoints.openai.api_server ...`)"
        )
    return result


def _logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined."""
    joined = re.sub(r"\\\r?\n", " ", text)
    return joined.splitlines()


def _until_control(words: list[str]) -> list[str]:
    """The words of the first simple command: up to `&`, `;`, a pipe or a redirection."""
    for i, word in enumerate(words):
        if word in _CONTROL or _REDIRECT.match(word):
            return words[:i]
    return words


def _is_assignment(word: str) -> bool:
    name, sep, _ = word.partition("=")
    return bool(sep) and bool(_ENV_NAME.match(name))


def _assignments(words: list[str], line: str) -> dict[str, str]:
    out = {}
    for word in words:
        if not _is_assignment(word):
            raise ServeImportError(f"expected KEY=VALUE in {line.strip()[:80]!r}, got {word!r}")
        name, _, value = word.partition("=")
        out[name] = value
    return out


def _server_args(command: list[str]) -> list[str] | None:
    """The arguments after the program, if `command` starts a vLLM server."""
    program = Path(command[0]).name
    if program not in _PROGRAMS and not program.startswith("python"):
        return None
    if program == "vllm":
        return command[2:] if command[1:2] == ["serve"] else None
    if command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]:
        return command[3:]
    if command[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]:
        return command[4:]
    return None


def _parse_args(args: list[str], result: ServeCommand, base: Path) -> None:
    options: dict[str, Any] = {}
    config_file: Path | None = None
    i = 0
    while i < len(args):
        word = args[i]
        if not word.startswith("-"):
            if result.model is not None or "model" in options:
                raise ServeImportError(f"unexpected argument {word!r}: the model is given twice")
            result.model = word
            i += 1
            continue
        name, sep, inline = word.partition("=")
        key = SHORT_FLAGS.get(name) or normalize_option(name)
        values: list[str] = [inline] if sep else []
        i += 1
        negated = key.startswith("no_") and not sep  # `--no-flag` takes no value either
        if not sep and not negated and key not in BOOLEAN_OPTIONS:
            while i < len(args) and not _is_flag(args[i]):
                values.append(args[i])
                i += 1
        if key == "config":
            if not values:
                raise ServeImportError("--config needs a file")
            config_file = (
                (base / values[0]) if not Path(values[0]).is_absolute() else Path(values[0])
            )
            continue
        if not values:
            options[key[3:] if negated else key] = not negated
        elif len(values) == 1:
            options[key] = _typed(values[0])
        else:
            options[key] = [_typed(v) for v in values]
    if config_file is not None:
        text = _read(config_file, f"--config {config_file}")
        _from_mapping(_yaml_mapping(text, config_file), result)
    _from_mapping(options, result)  # the command line overrides the file


def _is_flag(word: str) -> bool:
    """A flag, not a negative number."""
    return word.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", word)


def _typed(text: str) -> Any:
    if text.startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError:
            raise ServeImportError(f"invalid JSON value {text[:60]!r}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _yaml_mapping(text: str, path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ServeImportError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ServeImportError(f"{path}: expected a mapping of vLLM options")
    return data


def _from_mapping(data: dict[str, Any], result: ServeCommand) -> ServeCommand:
    for raw, value in data.items():
        key, value = logical_option(str(raw), value)  # `no-KEY: true` is KEY false
        if key == "model":
            result.model = str(value)
        elif key == "served_model_name":
            result.served_model_name = str(value[0] if isinstance(value, list) else value)
        elif key not in LAUNCHER_OPTIONS:
            result.options[key] = value
    return result
