"""Values a host cannot run, dropped from a space before a study starts.

What the host is (`HostFacts`) is read once at the edge (`study.build_harness`); here it is only
compared with each value a space can produce. The rules (`HOST_RULES`), each from vLLM's own
code or docs:

- vllm-cpu: an FP8 KV cache (`kv_cache_dtype: fp8`, `fp8_e4m3`, `fp8_e5m2`) needs AVX-512 or AMX
  (`vllm/v1/attention/backends/cpu_attn.py`, `_get_attn_isa`, 0.32: otherwise `NotImplementedError:
  FP8 KV cache on CPU requires x86 with AVX-512 or AMX.`, seen here: cpu-kv-fp8.log).
- CUDA: an FP8 KV cache in E4M3 (`fp8`, `fp8_e4m3`) needs compute capability 8.9 (Triton: `type
  fp8e4nv not supported in this architecture`, vllm-project/vllm#26431 on an RTX 3090, 8.6);
  E5M2 is left to the study (Triton has `fp8e5` on 8.6). `quantization: fp8` needs 7.5: vLLM
  0.32's FP8 docs run it as weight-only W8A16 (FP8 Marlin) from Turing on, W8A8 from 8.9.
- Any platform: a variant whose `model` (or a `speculative_config.model`: an EAGLE head, a
  draft model) is a local path (`/...`, `./...`, `~/...`) that does not exist here (the
  shipped spaces' `CHANGE-ME` paths are examples to edit); a hub name is left to the engine.
- Ascend: a graph mode or torchair path the installed vllm-ascend lacks (`engine/_ascend.py`,
  from its release notes): a choice that sets one is dropped (FULL below 0.12.0rc1, ...).

A rule drops a categorical choice (or a variant) that sets such a value; a fixed option that
sets one is an error (the space cannot run here at all).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engine import ascend_option_problems, fp8_kv_cache
from autotune.space._defaults import DefaultsDevice, batch_defaults, describe, world_size
from autotune.space._errors import SpaceError
from autotune.space._params import CategoricalParam, IntParam, format_value
from autotune.space._space import SearchSpace
from autotune.vocab.platform import AnyPlatform, Platform

FP8_CPU_FLAGS = ("avx512f", "amx_tile")


@dataclass(frozen=True)
class HostFacts:
    """What the host can run, as read before any launch. None: not read (nothing is judged)."""

    cpu_flags: frozenset[str] | None = None  # /proc/cpuinfo `flags`
    compute_capability: tuple[int, int] | None = None  # the lowest of the GPUs (nvidia-smi)
    ascend_version: str | None = None  # the installed vllm-ascend (package metadata)
    vllm_options: frozenset[str] | None = None  # the installed vLLM's option names
    vllm_version: str | None = None  # to say which vLLM lacks an option
    device_name: str | None = None  # the GPU or NPU vLLM's batch defaults depend on
    device_memory_bytes: int | None = None  # its memory (the smallest of the host's)

    @property
    def vllm_name(self) -> str:
        """`vLLM 0.32.0`, or `the installed vLLM` where its version was not read."""
        return f"vLLM {self.vllm_version}" if self.vllm_version else "the installed vLLM"


@dataclass(frozen=True)
class HostRule:
    """`option` values that `applies` to cannot run on `platform` where `problem` says why."""

    platform: Platform
    option: str
    applies: Callable[[Any], bool]
    problem: Callable[[HostFacts], str | None]


def _fp8_e4m3(value: Any) -> bool:
    return value in ("fp8", "fp8_e4m3")


def _no_avx512_or_amx(host: HostFacts) -> str | None:
    if host.cpu_flags is None or any(f in host.cpu_flags for f in FP8_CPU_FLAGS):
        return None
    return "an FP8 KV cache on CPU needs AVX-512 or AMX, and /proc/cpuinfo lists neither"


def _below(need: tuple[int, int], what: str) -> Callable[[HostFacts], str | None]:
    def problem(host: HostFacts) -> str | None:
        cap = host.compute_capability
        if cap is None or cap >= need:
            return None
        return f"{what} needs compute capability {need[0]}.{need[1]}; the GPU has {cap[0]}.{cap[1]}"

    return problem


HOST_RULES = (
    HostRule(Platform.CPU, "kv_cache_dtype", fp8_kv_cache, _no_avx512_or_amx),
    HostRule(Platform.CUDA, "kv_cache_dtype", _fp8_e4m3, _below((8, 9), "an FP8 (E4M3) KV cache")),
    HostRule(
        Platform.CUDA, "quantization", lambda v: v == "fp8", _below((7, 5), "fp8 quantization")
    ),
)


def host_problem(platform: AnyPlatform, options: dict[str, Any], host: HostFacts) -> str | None:
    """Why `options` cannot run on this host (the first rule that says so), or None. On
    Ascend, a graph mode the installed vllm-ascend lacks (`engine._ascend`) counts too."""
    spec = options.get("speculative_config")
    draft = spec.get("model") if isinstance(spec, dict) else None  # an EAGLE head, a drafter
    for name, model in (("model", options.get("model")), ("speculative_config.model", draft)):
        local = isinstance(model, str) and model.startswith(("/", "./", "../", "~"))
        if local and not Path(str(model)).expanduser().exists():
            return f"{name}={model}: no such checkpoint on this host"
    if platform == Platform.ASCEND and host.ascend_version is not None:
        for path, message in ascend_option_problems(options, host.ascend_version):
            return f"{path}: {message}"
    for rule in HOST_RULES:
        if (
            rule.platform == platform
            and rule.option in options
            and rule.applies(options[rule.option])
        ):
            problem = rule.problem(host)
            if problem is not None:
                return f"{rule.option}={format_value(options[rule.option])}: {problem}"
    return None


def restrict_to_host(space: SearchSpace, host: HostFacts) -> tuple[SearchSpace, list[str]]:
    """The space without the values `host` cannot run, and one line per parameter that lost
    some (a baseline that is dropped is replaced by the first remaining choice, and the line
    says so). Raises SpaceError when a fixed option cannot run, or no choice of a parameter is
    left."""
    fixed = host_problem(space.platform, space.fixed, host)
    if fixed is not None:
        raise SpaceError(f"{space.label}: fixed.{fixed}")
    missing = _options_missing(space, host)
    notes: list[str] = []
    parameters = []
    for param in space.parameters:
        if param.name in missing:
            notes.append(f"search space {space.name}: {missing[param.name]}")
            continue
        kept, note = (
            _restrict(space, param, host) if isinstance(param, CategoricalParam) else (param, None)
        )
        parameters.append(kept)
        if note is not None:
            notes.append(f"search space {space.name}: {note}")
    if not notes:
        return space, []
    data = space.model_dump()
    data["parameters"] = [p.model_dump() for p in parameters]
    prune_conditions(data)  # a value dropped here cannot be another's condition
    restricted = SearchSpace.model_validate(data)
    restricted._source = space.source
    return restricted, notes


def _options_missing(space: SearchSpace, host: HostFacts) -> dict[str, str]:
    """The parameters to drop, each with its line: those whose option the installed vLLM
    lacks, and those set only with one of them (`only_if`). Raises SpaceError for a fixed
    option it lacks: the space names it for every trial."""
    if host.vllm_options is None or space.allow_unknown_options:
        return {}  # not read; or options the space passes on purpose (a plugin's)
    which = host.vllm_name
    for name in space.fixed:
        if name not in host.vllm_options:
            raise SpaceError(
                f"{space.label}: fixed.{name}: not an option of {which}; drop it or upgrade"
            )
    dropped: dict[str, str] = {}
    for param in space.parameters:
        option = param.target_option
        if option is not None and option not in host.vllm_options:
            dropped[param.name] = (
                f"dropped parameter {param.name} before the study: {which} has no option "
                f"{option} (a later vLLM has it)"
            )
    for param in space.parameters:
        gone = [name for name in param.only_if or {} if name in dropped]
        if gone and param.name not in dropped:
            dropped[param.name] = (
                f"dropped parameter {param.name} before the study: it is set only with "
                f"{gone[0]}, which was dropped"
            )
    if len(dropped) == len(space.parameters):
        raise SpaceError(f"{space.label}: {which} has none of the space's options")
    return dropped


def _restrict(
    space: SearchSpace, param: CategoricalParam, host: HostFacts
) -> tuple[CategoricalParam, str | None]:
    """The parameter without the choices `host` cannot run, and the line that says why."""
    why: dict[int, str] = {}
    for i, choice in enumerate(param.choices):
        if param.variants:
            options = space.variants[str(choice)]
        elif param.target_option is not None and choice is not None:
            options = {param.target_option: param.engine_value(choice)}
        else:
            continue
        problem = host_problem(space.platform, options, host)
        if problem is not None:
            why[i] = problem
    if not why:
        return param, None
    kept = [c for i, c in enumerate(param.choices) if i not in why]
    dropped = ", ".join(format_value(param.choices[i]) for i in why)
    reason = next(iter(why.values()))
    if not kept:
        raise SpaceError(f"{space.label}: no choice of {param.name} runs on this host ({reason})")
    update: dict[str, Any] = {"choices": kept}
    note = f"dropped {param.name} {dropped} before the study ({reason})"
    if not any(_same(c, param.baseline) for c in kept):
        update["baseline"] = kept[0]
        note += (
            f"; the baseline {param.name}={format_value(param.baseline)} is dropped too: "
            f"trial 0 uses {format_value(kept[0])}, the first remaining choice"
        )
    if isinstance(param.memory, list):
        update["memory"] = [c for c in param.memory if any(_same(c, k) for k in kept)]
    return CategoricalParam.model_validate({**param.model_dump(), **update}), note


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def with_vllm_defaults(
    space: SearchSpace, host: HostFacts, scenario: str, options: dict[str, Any]
) -> tuple[SearchSpace, str | None]:
    """The space with each `baseline: vllm_default` set to what the installed vLLM picks on
    this host's device (`_defaults.batch_defaults`) for `scenario` and the baseline's world
    size and performance mode (`options`: the spec's fixed options, over the space's), and
    one line that says which; (space, None) where no parameter asks. Raises SpaceError when
    the value falls outside its parameter's range."""
    marked = [p for p in space.parameters if isinstance(p, IntParam) and p.vllm_default]
    if not marked:
        return space, None
    baseline = {**space.to_engine(space.baseline_params())[0], **options}
    size = world_size(baseline)
    device = DefaultsDevice(host.device_name, host.device_memory_bytes)
    values = batch_defaults(space.platform, device, size, scenario)
    if baseline.get("performance_mode") == "throughput":
        values = {k: 2 * v for k, v in values.items()}
    data = space.model_dump()
    shown = []
    for param in marked:
        value = values[param.target_option or param.name]
        if not param.contains(value):
            raise SpaceError(
                f"{space.label}: parameters.{param.name}: vLLM's default here is {value}, "
                f"outside [{param.low}, {param.high}]: widen the range"
            )
        for raw in data["parameters"]:
            if raw["name"] == param.name:
                raw["baseline"] = value
        shown.append(f"{param.name}={value}")
    resolved = SearchSpace.model_validate(data)
    resolved._source = space.source
    where = "an API server" if scenario != "offline" else "offline (`vllm.LLM`)"
    what = "the CPU" if space.platform == Platform.CPU else describe(device)
    note = (
        f"baseline {', '.join(shown)}: {host.vllm_name}'s defaults for {what}, {where}, "
        f"world size {size}"
    )
    return resolved, note


# Options only `vllm serve` reads: its API-server module (`python -m vllm.entrypoints.openai.
# api_server`, the default engine command, which vllm-cpu needs) runs one server whatever
# `--api-server-count` says (vLLM 0.32: `entrypoints/launchers/api_server/entry.py` main calls
# `run_server` alone; `entrypoints/cli/serve.py` is what starts several).
SERVE_ONLY_OPTIONS = ("api_server_count",)
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def restrict_to_command(space: SearchSpace, command: str) -> tuple[SearchSpace, list[str]]:
    """The space without parameters of options the engine `command` does not read (one line
    each): `api_server_count` under the API-server module."""
    if API_SERVER_MODULE not in command:
        return space, []
    dropped = [p.name for p in space.parameters if p.target_option in SERVE_ONLY_OPTIONS]
    dropped += [
        p.name
        for p in space.parameters
        if p.name not in dropped and any(n in dropped for n in p.only_if or {})
    ]
    if not dropped or len(dropped) == len(space.parameters):
        return space, []
    data = space.model_dump()
    data["parameters"] = [p.model_dump() for p in space.parameters if p.name not in dropped]
    kept = SearchSpace.model_validate(data)
    kept._source = space.source
    why = (
        f"the engine command runs {API_SERVER_MODULE}, one API server whatever "
        "--api-server-count says; --engine-command 'vllm serve' tunes it"
    )
    return kept, [
        f"search space {space.name}: dropped parameter {name} before the study: {why}"
        for name in dropped
    ]


def prune_conditions(data: dict[str, Any]) -> None:
    """`only_if` values the conditions' parameters no longer have are left out (a dropped
    method, say); a parameter with none left could never be set, and goes."""
    choices = {raw["name"]: raw.get("choices") for raw in data["parameters"] if "choices" in raw}
    kept = []
    for raw in data["parameters"]:
        conditions = raw.get("only_if") or {}
        for name, values in conditions.items():
            if choices.get(name) is not None:
                conditions[name] = [v for v in values if v in choices[name]]
        if all(conditions.values()):
            kept.append(raw)
    data["parameters"] = kept
