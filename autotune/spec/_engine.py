"""EngineSpec: how a study starts its engines (the spec's `engine:` part, `--engine-command`
and `--option`), validated at the edge as the rest of the spec is."""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from autotune.engine import (
    DEFAULT_COMMAND,
    DEFAULT_OFFLINE_COMMAND,
    OFFLINE_PLACEHOLDERS,
    SERVER_PLACEHOLDERS,
    command_problem,
    env_name_problem,
    is_known_option,
    normalize_option,
    option_value_problem,
    suggest_option,
)
from autotune.inputs.limits import Seconds
from autotune.space import option_range_problem

# vLLM options each trial gets from the tuner: an option would change the model under the
# study's name, or be overridden by the `--host`/`--port` flags the launcher appends.
TUNERS_OPTIONS = frozenset({"model", "host", "port"})


class EngineSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(
        default=DEFAULT_COMMAND,
        description="Server command; `{python}` is the tuner's interpreter; `--config`, "
        "`--host` and `--port` are appended unless `{config}`/`{host}`/`{port}` appear (all "
        "three, once each); not run by a shell",
    )
    offline_command: str = Field(
        default=DEFAULT_OFFLINE_COMMAND,
        description="The offline scenario's batch program; `--config`, `--prompts` and `--out` "
        "are appended unless `{config}`/`{prompts}`/`{out}` appear (all three, once each)",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="vLLM options fixed for every trial (win over space)"
    )
    env: dict[str, str] = Field(default_factory=dict, description="Engine environment variables")
    startup_timeout_s: Seconds = Field(default=600.0, description="Limit to become ready")
    benchmark_timeout_s: Seconds = Field(
        default=1800.0, description="Limit for a trial's benchmark (warm-up included)"
    )
    hang_timeout_s: Seconds = Field(
        default=120.0, description="Longest silence with requests in flight: a hang"
    )
    cores: str | None = Field(default=None, description="Cores for `{cores}` (default: all)")

    @field_validator("options")
    @classmethod
    def _normalize(cls, value: dict[str, Any]) -> dict[str, Any]:
        options = {normalize_option(k): v for k, v in value.items()}
        for name in options:
            if name in TUNERS_OPTIONS:
                raise ValueError(
                    f"{name} is the tuner's to set for each trial (the model is --model; the "
                    "host and port it chooses); drop the option"
                )
            # A misspelling of a known option is refused; a name close to none may be an
            # option of another vLLM version (or plugin) and is passed on as it is.
            hint = None if is_known_option(name) else suggest_option(name)
            if hint is not None:
                raise ValueError(f"unknown vLLM option '{name}' (did you mean '{hint}'?)")
            value = options[name]
            problem = option_value_problem(name, value) or option_range_problem(name, value)
            if problem is not None:
                raise ValueError(f"{name}: {problem}")
        return options

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if (problem := env_name_problem(name)) is not None:
                raise ValueError(problem)
        return value

    @field_validator("command", "offline_command")
    @classmethod
    def _a_command(cls, value: str, info: ValidationInfo) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        try:
            shlex.split(value)
        except ValueError as exc:  # "No closing quotation"
            raise ValueError(f"cannot be split into words: {str(exc).lower()}") from None
        offline = info.field_name == "offline_command"
        placeholders = OFFLINE_PLACEHOLDERS if offline else SERVER_PLACEHOLDERS
        if (problem := command_problem(value, placeholders)) is not None:
            raise ValueError(problem)
        return value
