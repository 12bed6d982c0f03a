"""Search-space parameters: one pydantic model per `type`, each knowing its Optuna distribution.

A parameter sets exactly one target: a vLLM option (default: the parameter's name) or an
environment variable (`env`). A dotted option (`compilation_config.cudagraph_mode`) sets one key
of a dict option: the option is the first part and the value is wrapped into the nested dict,
which is how `vllm serve --config` and the command line take dict options. Semantic checks
(ranges, step grid, baseline) are returned as `(field, message)` issues so that the space can
report them with their full path.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import BaseTrial
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from autotune.engine import env_name_problem, normalize_option
from autotune.space._derived import DERIVED

# The value a launcher replaces with the cores given to the trial (e.g. "0-3" or "0|1").
CORES_PLACEHOLDER = "{cores}"

ChoiceValue = str | bool | int | float | None
# A bound, step or baseline: finite (`high: .inf` would pass here and fail in the sampler; its
# size is bounded with the option's range, space/_bounds.py). Strict: a float accepts ints and
# refuses strings.
StrictFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Issue = tuple[str, str]

_FLOAT_TOLERANCE = 1e-9


def _on_grid(value: float, low: float, step: float) -> bool:
    k = (value - low) / step
    return math.isclose(k, round(k), rel_tol=0.0, abs_tol=_FLOAT_TOLERANCE * max(1.0, abs(k)))


def _decimals(number: float) -> int:
    """Digits after the point in the shortest spelling of `number` (0.01 -> 2, 1e-05 -> 5)."""
    text = repr(float(number))
    if "e" in text:
        mantissa, _, exponent = text.partition("e")
        return max(0, len(mantissa.partition(".")[2].rstrip("0")) - int(exponent))
    return len(text.partition(".")[2].rstrip("0"))


def env_string(value: Any) -> str | None:
    """The environment spelling of a value; None for "do not set" (null or "")."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _spelled(value: Any) -> str:
    """A value as YAML writes it, its type shown: `"true"` (text), `true`, `1.0`, `null`."""
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value) if isinstance(value, float) else format_value(value)


def format_value(value: Any) -> str:
    """A short human spelling of a parameter value (YAML-like)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str) and (value == "" or " " in value):
        return repr(value)
    return str(value)


# What places a trial's engine on the host: the tuner sets it (a lease's devices) or keeps it the
# same for every trial; a parameter may not vary it (docs/devices.md). On CPU a lease's core slot
# replaces the binding a parameter chose (study/_harness.py), so that one may be tuned.
PLACEMENT_ENV = {
    "CUDA_VISIBLE_DEVICES": "each trial's lease sets it (narrow the pool with --devices)",
    "ASCEND_RT_VISIBLE_DEVICES": "each trial's lease sets it (narrow the pool with --devices)",
}
PLACEMENT_OPTIONS = {
    ("additional_config", "enable_cpu_binding"): (
        "vllm-ascend pins each worker to a CPU pool sliced from the same CPU set for every "
        "NPU, so trials side by side get disjoint pools only when all bind alike; set it under "
        "`fixed:` (on by default on ARM since vllm-ascend 0.18.0rc1)"
    ),
}


class _ParamBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Optuna parameter name; unique in the space")
    option: str | None = Field(
        default=None,
        description="vLLM option this parameter sets (default: its name); `a.b` sets key `b` "
        "of the dict option `a`",
    )
    env: str | None = Field(
        default=None, description="Environment variable this parameter sets instead of an option"
    )
    scale: StrictInt | None = Field(
        default=None,
        ge=1,
        description="Option value = parameter value * scale (int only)",
    )
    description: str | None = Field(default=None, description="What the parameter controls")
    only_if: dict[str, list[ChoiceValue]] | None = Field(
        default=None,
        description="Set only while these parameters have one of these values "
        "(`{speculative_method: [ngram]}`); otherwise left out, as if absent",
    )
    memory: Literal["up", "down", "none"] | list[ChoiceValue] | None = Field(
        default=None,
        description="How the value drives memory use: `up` (a larger value needs more), `down`, "
        "`none` (no effect), or the choices from least to most memory. Default: from the "
        "option's name (docs/search-space.md); else configs must match on this parameter",
    )

    @field_validator("option")
    @classmethod
    def _normalize_option(cls, value: str | None) -> str | None:
        return normalize_option(value) if value is not None else None

    @field_validator("env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and (problem := env_name_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @property
    def target_option(self) -> str | None:
        """The vLLM option this parameter sets, or None if it sets an env var (or a variant).

        For a dotted `option` this is the dict option (`compilation_config`); parameters of
        different keys of one dict option are merged into it (`option_path`).
        """
        path = self.option_path
        return path[0] if path else None

    @property
    def option_path(self) -> tuple[str, ...]:
        """The option and the keys below it (`("compilation_config", "cudagraph_mode")`)."""
        if self.env is not None:
            return ()
        return tuple((self.option or normalize_option(self.name)).split("."))

    def issues(self) -> list[Issue]:
        """Semantic problems as `(field, message)`; empty when the parameter is valid."""
        found: list[Issue] = []
        if self.option is not None and self.env is not None:
            found.append(("env", "set either `option` or `env`, not both"))
        if self.option is not None and not all(self.option.split(".")):
            found.append(("option", f"empty key in '{self.option}'"))
        if self.scale is not None and not isinstance(self, IntParam):
            found.append(("scale", "only int parameters take a scale"))
        found.extend(self._placement_issues())
        found.extend(self._memory_issues())
        found.extend(self._range_issues())
        if not found and not self.contains(self.baseline_value()):
            found.append(("baseline", self._baseline_message()))
        return found

    def _placement_issues(self) -> list[Issue]:
        """Where a trial's engine runs is the tuner's to set, the same for every trial."""
        if self.env is not None and self.env in PLACEMENT_ENV:
            return [("env", f"'{self.env}' cannot be tuned: {PLACEMENT_ENV[self.env]}")]
        if self.env is None and self.option_path in PLACEMENT_OPTIONS:
            why = PLACEMENT_OPTIONS[self.option_path]
            field = "option" if self.option is not None else "name"
            return [(field, f"'{'.'.join(self.option_path)}' cannot be tuned: {why}")]
        return []

    def contains(self, value: Any) -> bool:
        """Whether `value` is a valid value of this parameter."""
        dist = self.distribution()
        try:
            return bool(dist._contains(dist.to_internal_repr(value)))
        except (ValueError, TypeError, OverflowError):  # inf for an int
            return False

    def engine_value(self, value: Any) -> Any:
        """The value of `target_option`: the parameter value times `scale`, nested for `a.b`."""
        if self.scale is not None and value is not None:
            value = value * self.scale
        for key in reversed(self.option_path[1:]):
            value = {key: value}
        return value

    def baseline_value(self) -> Any:
        return getattr(self, "baseline")  # noqa: B009 - every concrete type declares it

    def active(self, params: dict[str, Any]) -> bool:
        """Whether this parameter is set for `params` (see `only_if`)."""
        return all(params.get(k) in values for k, values in (self.only_if or {}).items())

    def distribution(self) -> BaseDistribution:
        raise NotImplementedError

    def describe_values(self) -> str:
        """The values this parameter takes, in words (`a whole number from 1 to 256`)."""
        return "true or false"

    def suggest(self, trial: BaseTrial) -> Any:
        raise NotImplementedError

    def _range_issues(self) -> list[Issue]:
        return []

    def _memory_issues(self) -> list[Issue]:
        if not isinstance(self.memory, list):
            return []
        if not isinstance(self, CategoricalParam | BoolParam):
            return [("memory", "a list order is for categorical and bool parameters")]
        choices = self.distribution().choices  # type: ignore[attr-defined]
        if sorted(map(repr, self.memory)) != sorted(map(repr, choices)):
            shown = ", ".join(format_value(c) for c in choices)
            return [("memory", f"must list every choice once, least memory first: [{shown}]")]
        return []

    def _baseline_message(self) -> str:
        return f"not a valid value (got {format_value(self.baseline_value())})"


class IntParam(_ParamBase):
    """An integer range, optionally log-scaled or on a step grid."""

    type: Literal["int"] = "int"
    low: StrictInt = Field(description="Smallest value (inclusive)")
    high: StrictInt = Field(description="Largest value (inclusive)")
    step: StrictInt = Field(default=1, ge=1, description="Grid step from `low`")
    log: StrictBool = Field(default=False, description="Sample on a log scale")
    baseline: StrictInt = Field(description="Value of trial 0")
    vllm_default: StrictBool = Field(
        default=False,
        description="The baseline is vLLM's default for the device (`baseline: vllm_default`)",
    )

    def distribution(self) -> BaseDistribution:
        return IntDistribution(self.low, self.high, log=self.log, step=self.step)

    def suggest(self, trial: BaseTrial) -> Any:
        return trial.suggest_int(self.name, self.low, self.high, step=self.step, log=self.log)

    def _range_issues(self) -> list[Issue]:
        if self.low > self.high:
            return [("low", f"must be <= high (got {self.low} > {self.high})")]
        if self.log and self.step != 1:
            return [("log", "log and step > 1 cannot be combined")]
        if self.log and self.low < 1:
            return [("low", f"must be >= 1 with log (got {self.low})")]
        if (self.high - self.low) % self.step:
            return [
                (
                    "high",
                    f"must be low + k*step (got {self.high}; low {self.low}, step {self.step})",
                )
            ]
        return []

    def describe_values(self) -> str:
        step = f" in steps of {self.step}" if self.step != 1 else ""
        return f"a whole number from {self.low} to {self.high}{step}"

    def _baseline_message(self) -> str:
        b = self.baseline
        if not self.low <= b <= self.high:
            return f"must be within [{self.low}, {self.high}] (got {b})"
        return f"must be on the step grid low + k*step (got {b}; low {self.low}, step {self.step})"


class FloatParam(_ParamBase):
    """A real range, optionally log-scaled or on a step grid."""

    type: Literal["float"] = "float"
    low: StrictFloat = Field(description="Smallest value (inclusive)")
    high: StrictFloat = Field(description="Largest value (inclusive)")
    step: StrictFloat | None = Field(default=None, gt=0, description="Grid step from `low`")
    log: StrictBool = Field(default=False, description="Sample on a log scale")
    baseline: StrictFloat = Field(description="Value of trial 0")

    def distribution(self) -> BaseDistribution:
        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def suggest(self, trial: BaseTrial) -> Any:
        return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)

    def engine_value(self, value: Any) -> Any:
        """On a step grid, the grid's spelling: Optuna gives 0.8 + 4 * 0.01 as
        0.8400000000000001, which would land in the exported YAML as it is."""
        if self.step is not None and isinstance(value, float):
            value = round(value, max(_decimals(self.step), _decimals(self.low)))
        return super().engine_value(value)

    def contains(self, value: Any) -> bool:
        # Optuna's own check is exact; a YAML 0.9 on a 0.01 grid from 0.8 needs a tolerance.
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if not self.low <= value <= self.high:
            return False
        return self.step is None or _on_grid(value, self.low, self.step)

    def _range_issues(self) -> list[Issue]:
        if self.low > self.high:
            return [("low", f"must be <= high (got {self.low:g} > {self.high:g})")]
        if self.log and self.step is not None:
            return [("log", "log and step cannot be combined")]
        if self.log and self.low <= 0:
            return [("low", f"must be > 0 with log (got {self.low:g})")]
        if self.step is not None and not _on_grid(self.high, self.low, self.step):
            return [
                (
                    "high",
                    f"must be low + k*step (got {self.high:g}; low {self.low:g}, "
                    f"step {self.step:g})",
                )
            ]
        return []

    def describe_values(self) -> str:
        step = f" in steps of {self.step:g}" if self.step is not None else ""
        return f"a number from {self.low:g} to {self.high:g}{step}"

    def _baseline_message(self) -> str:
        b = self.baseline
        if not self.low <= b <= self.high:
            return f"must be within [{self.low:g}, {self.high:g}] (got {b:g})"
        return f"must be on the step grid low + k*step (got {b:g}; step {self.step:g})"


class CategoricalParam(_ParamBase):
    """One of a list of values; `null` means the option is not passed (an env var not set)."""

    type: Literal["categorical"] = "categorical"
    choices: list[ChoiceValue] = Field(min_length=1, description="The values to choose from")
    baseline: ChoiceValue = Field(description="Value of trial 0; one of the choices")
    variants: StrictBool = Field(
        default=False, description="Choices name entries of the file's `variants` mapping"
    )
    derived: list[str] = Field(
        default_factory=list,
        description="Choices whose value is computed from the config's other options when it "
        "is made (space/_derived.py: decode_batch, taper, small_batches)",
    )

    @property
    def target_option(self) -> str | None:
        return None if self.variants else super().target_option

    def distribution(self) -> BaseDistribution:
        return CategoricalDistribution(self.choices)

    def suggest(self, trial: BaseTrial) -> Any:
        return trial.suggest_categorical(self.name, self.choices)

    def contains(self, value: Any) -> bool:
        # Strict on type: 1, 1.0 and True are equal in Python but different engine values.
        return any(type(c) is type(value) and c == value for c in self.choices)

    def _range_issues(self) -> list[Issue]:
        for i, choice in enumerate(self.choices):
            if isinstance(choice, float) and not math.isfinite(choice):
                return [(f"choices[{i}]", f"expected a finite number (got {choice})")]
            same = next((j for j, c in enumerate(self.choices[:i]) if self._alike(c, choice)), None)
            if same is not None:
                return [(f"choices[{i}]", self._duplicate(same, choice))]
        if self.variants and (self.option is not None or self.env is not None):
            return [("variants", "a variants parameter sets no `option` or `env`")]
        if self.variants and not all(isinstance(c, str) for c in self.choices):
            return [("choices", "variant choices must be names (strings)")]
        for i, name in enumerate(self.derived):
            if name not in DERIVED:
                known = ", ".join(DERIVED)
                return [(f"derived[{i}]", f"unknown derived value {name!r} (known: {known})")]
            if name not in self.choices:
                return [(f"derived[{i}]", f"{name!r} is not one of the choices")]
            if self.variants or self.env is not None:
                return [("derived", "a derived value sets an option, not a variant or env var")]
        return []

    def _alike(self, a: ChoiceValue, b: ChoiceValue) -> bool:
        """Two choices one could not tell apart: equal (1, 1.0, true), shown alike (true and
        "true", 1 and "1", in any case) or, for a variable, set alike (null and "")."""
        if a == b or format_value(a).lower() == format_value(b).lower():
            return True
        return self.env is not None and env_string(a) == env_string(b)

    def _duplicate(self, j: int, again: ChoiceValue) -> str:
        first = self.choices[j]
        if type(first) is type(again) and first == again:
            return f"duplicate choice {format_value(again)}"
        return (
            f"{_spelled(again)} and choices[{j}] {_spelled(first)} are one value to the engine "
            "and in every table: give it once"
        )

    def describe_values(self) -> str:
        return f"one of [{', '.join(format_value(c) for c in self.choices)}]"

    def _baseline_message(self) -> str:
        shown = ", ".join(format_value(c) for c in self.choices)
        return f"must be one of the choices [{shown}] (got {format_value(self.baseline)})"


class BoolParam(_ParamBase):
    """A switch: `false` or `true` (for env vars: "0" or "1")."""

    type: Literal["bool"] = "bool"
    baseline: StrictBool = Field(description="Value of trial 0")

    def distribution(self) -> BaseDistribution:
        return CategoricalDistribution([False, True])

    def suggest(self, trial: BaseTrial) -> Any:
        return trial.suggest_categorical(self.name, [False, True])


Parameter = Annotated[
    IntParam | FloatParam | CategoricalParam | BoolParam, Field(discriminator="type")
]


def value_problem(parameters: list[Parameter], name: str, value: Any) -> str | None:
    """Why parameter `name` cannot take `value` (a user's, for trial 0 or a prediction), in
    words that blame the value and give the parameter's values; None when it can."""
    param = next((p for p in parameters if p.name == name), None)
    if param is None:
        return f"not a parameter of the space ({', '.join(p.name for p in parameters)})"
    if param.contains(value):
        return None
    return f"{format_value(value)} is not a value of {name}, which is {param.describe_values()}"


PARAMETER_TYPES = ("int", "float", "categorical", "bool")
