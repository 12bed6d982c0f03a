"""What this host and the spec's model can run, read before any launch: the space's values the
host cannot run (`space.restrict_to_host`) or the model cannot use (a dense model: no expert
parallel) dropped with a line that says so, and a trial's engine config from its parameters.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.devices import (
    Device,
    DeviceError,
    cpu_flags,
    discover,
    gpu_compute_capability,
)
from autotune.engine import (
    EngineConfig,
    installed_ascend_version,
    installed_vllm_options,
    installed_vllm_version,
    resolve_env,
)
from autotune.space import (
    HostFacts,
    ModelInfo,
    SearchSpace,
    SpaceError,
    restrict_to_command,
    restrict_to_host,
    restrict_to_model,
    with_vllm_defaults,
)
from autotune.spec import SpecError, TuneSpec
from autotune.vocab.platform import AnyPlatform, Platform

logger = logging.getLogger(__name__)


def for_this_model(space: SearchSpace, spec: TuneSpec) -> tuple[SearchSpace, ModelInfo | None]:
    """`space` without what the spec's model (a dense one: expert parallel, EPLB) and engine
    command (the API-server module: `api_server_count`) cannot use, one line each; and the
    model's numbers (None for a hub name)."""
    try:
        model = ModelInfo.from_path(spec.model)
        space, notes = restrict_to_model(space, model)
        space, more = restrict_to_command(space, spec.engine.command)
    except SpaceError as exc:
        raise SpecError(str(exc)) from None
    for line in [*notes, *more]:
        logger.warning("%s", line)
    return space, model


def check_options(spec: TuneSpec, space: SearchSpace, host: HostFacts) -> None:
    """Raise SpecError for an option of the spec (`--option`, `engine.options`) that the
    installed vLLM lacks: every trial, the baseline first, would fail on it (a space that
    passes a plugin's options on purpose says `allow_unknown_options`)."""
    if host.vllm_options is None or space.allow_unknown_options:
        return
    for name in spec.engine.options:
        if name not in host.vllm_options:
            raise SpecError(
                f"--option {name}: not an option of {host.vllm_name}; check its spelling "
                "(`vllm serve --help=all`), or give the space `allow_unknown_options: true` "
                "for a plugin's"
            )


def read_host_facts(
    platform: AnyPlatform, root: Path = Path("/"), devices: Sequence[Device] | None = None
) -> HostFacts:
    """What this host can run, for a space of `platform`: the CPU's flags on a CPU space, the
    GPUs' lowest compute capability (nvidia-smi, where installed) on a CUDA one, the installed
    vllm-ascend on an Ascend one; on both, the device vLLM's batch defaults depend on: the
    smallest of `devices` (the study's pool, already read), else of the host's."""
    facts = HostFacts(vllm_options=installed_vllm_options(), vllm_version=installed_vllm_version())
    if platform == Platform.CPU:
        return dataclasses.replace(facts, cpu_flags=cpu_flags(root))
    if platform == Platform.CUDA:
        facts = dataclasses.replace(facts, compute_capability=gpu_compute_capability())
    if platform == Platform.ASCEND:
        facts = dataclasses.replace(facts, ascend_version=installed_ascend_version())
    if platform in (Platform.CUDA, Platform.ASCEND):
        name, memory = _smallest_device(platform, root, devices)
        facts = dataclasses.replace(facts, device_name=name, device_memory_bytes=memory)
    return facts


def _smallest_device(
    platform: AnyPlatform, root: Path, devices: Sequence[Device] | None
) -> tuple[str | None, int | None]:
    """The name and memory of the GPU or NPU with the least memory of `devices` (else of the
    host's: vLLM reads its defaults from the device it runs on; on a mixed host this is the
    cautious one); (None, None) where the tool cannot say."""
    if devices is None:
        try:
            devices = discover(platform, root=root).devices
        except (DeviceError, OSError, ValueError) as err:
            logger.info("cannot read the %s device for vLLM's defaults: %s", platform, err)
            return None, None
    sized = [d for d in devices if d.total_bytes]
    if not sized:
        return None, None
    smallest = min(sized, key=lambda d: d.total_bytes or 0)
    return smallest.name, smallest.total_bytes


def on_this_host(
    space: SearchSpace,
    host: HostFacts,
    scenario: str = "online",
    options: dict[str, Any] | None = None,
) -> tuple[SearchSpace, str | None]:
    """`space` without the values `host` cannot run, one warning per parameter that lost some,
    and with vLLM's batch defaults for this host's device where its baseline asks for them
    (`baseline: vllm_default`) for `scenario` and the spec's fixed `options`, one line saying
    which (also returned). Raises SpecError when the space cannot run here at all."""
    try:
        restricted, notes = restrict_to_host(space, host)
        resolved, note = with_vllm_defaults(restricted, host, scenario, options or {})
    except SpaceError as exc:
        raise SpecError(str(exc)) from None
    for line in notes:
        logger.warning("%s", line)
    if note is not None:
        logger.info("%s", note)
    return resolved, note


def trial_engine_config(
    spec: TuneSpec,
    space: SearchSpace,
    params: dict[str, Any],
    extra_env: dict[str, str] | None = None,
    cores: str | None = None,
) -> EngineConfig:
    """The engine config of a point of the space: the space's options and variables, the
    spec's fixed ones over them, then `extra_env` (a lease's devices); `{cores}` is `cores`
    (default: the spec's, else every usable core)."""
    options, env = space.to_engine(params)
    options.update(spec.engine.options)
    env.update(spec.engine.env)
    env.update(extra_env or {})
    return EngineConfig(
        model=model_ref(spec.model),
        served_model_name=spec.api_model_name,
        args=options,
        env=resolve_env(env, cores or spec.engine.cores),
    )


def model_ref(model: str) -> str:
    """A local model path made absolute (engines run in other folders); hub names as given."""
    path = Path(model)
    return str(path.resolve()) if path.exists() else model
