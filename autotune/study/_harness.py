"""What runs a study's trials on this machine, built once from a `TuneSpec`.

`build_harness` turns a spec into the space, the workload plan, the launch settings, the
measure of one trial and, for commands that run trials side by side, the device pool and the
number of lanes. What the host can run is read here, once, before any launch: the space's
values it cannot run are dropped with a warning that says so (`space.restrict_to_host`).
`tune`, `worker`, `confirm` and `profile` all start from one, so that a trial, its
re-measurement and its profile are launched the same way.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import InitVar, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from autotune.bench import (
    RequestSpec,
    VllmBenchError,
    WorkloadError,
    build_requests,
    check_installed,
    longest_request,
)
from autotune.devices import (
    Device,
    DeviceError,
    DeviceMemory,
    DevicePool,
    Lease,
    cpu_flags,
    device_memory,
    discover,
    gpu_compute_capability,
    hold_host,
    plan_lanes,
)
from autotune.engine import (
    EngineConfig,
    LaunchSettings,
    installed_ascend_version,
    installed_vllm_options,
    installed_vllm_version,
    resolve_env,
)
from autotune.measure import Judge, Measure, Measurement, Workplan, measure
from autotune.space import (
    HostFacts,
    ModelInfo,
    SearchSpace,
    SpaceError,
    layout_names,
    load_space,
    restrict_to_command,
    restrict_to_host,
    restrict_to_model,
    value_problem,
    with_vllm_defaults,
)
from autotune.spec import SpecError, TuneSpec
from autotune.study._errors import difference
from autotune.study._slos import StudyBounds
from autotune.vocab.platform import AnyPlatform, Platform

logger = logging.getLogger(__name__)

BASELINE_RUNS = 3  # benchmark runs of the baseline trial on its one engine (medians)


def _unknown_memory(ids: list[int] | None = None) -> DeviceMemory | None:
    return None


@dataclass
class Harness:
    """A study's machinery on this machine.

    `measure` does the device work of one trial. `device_memory(ids)` says what memory a
    trial's leased devices have now, the tightest of them (ids None: the first device; the
    result None: unknown, no estimate; a trial whose config fits what the study has had free
    there, but not what other processes leave, waits up to `memory_wait_s`). With a device
    `pool`, each trial leases its devices from it (tensor x pipeline parallel of them) and
    sees only those; `lanes` trials run at once. Setting `cancel` stops every lane as Ctrl-C
    does. `requests_per_run`: the measured requests of one benchmark run (early stopping counts
    them). `host`: this worker's host as trials record it. `baseline_measure`: the baseline's
    device work, where it differs (with SLOs relative to it, `BASELINE_RUNS` benchmark runs on
    its one engine; None: `measure`).
    """

    spec: TuneSpec
    space: SearchSpace
    measure: Measure
    baseline_measure: Measure | None = None
    device_memory: Callable[[list[int] | None], DeviceMemory | None] = _unknown_memory
    pool: DevicePool | None = None
    lanes: int = 1
    cancel: threading.Event = field(default_factory=threading.Event)
    requests_per_run: int = 0
    host: str = field(default_factory=socket.gethostname)
    # How long a trial waits for memory other processes hold on its devices (its config fits
    # what the study has had free there), and how often it reads again (`_room.py`).
    memory_wait_s: float = 600.0
    memory_poll_s: float = 5.0
    plan: Workplan | None = None  # the workload (None: a measure that brings its own)
    settings: LaunchSettings | None = None
    slo_bounds: InitVar[StudyBounds | None] = None  # the plan's (None: the spec's, a new one)
    baseline_note: str | None = None  # which vLLM defaults the baseline took (`vllm_default`)
    # The layout parameters a MoE study decides first (`_stages.py`); empty: one stage.
    layout: list[str] = field(default_factory=list)
    bounds: StudyBounds = field(init=False)  # the study's SLO bounds (`_slos`): the spec's, fixed

    def __post_init__(self, slo_bounds: StudyBounds | None) -> None:
        if self.lanes < 1:
            raise ValueError(f"lanes must be >= 1, not {self.lanes}")
        self.bounds = slo_bounds if slo_bounds is not None else StudyBounds.of(self.spec)

    def engine_config(self, params: dict[str, Any], lease: Lease | None = None) -> EngineConfig:
        """The engine config of `params`; with a lease, shown only the leased devices (on CPU:
        its workers bound to the leased cores, whatever binding the space chose)."""
        if lease is None:
            return trial_engine_config(self.spec, self.space, params)
        cores = None
        if self.pool is not None and self.pool.platform == Platform.CPU:
            cores = lease.env["VLLM_CPU_OMP_THREADS_BIND"]
        return trial_engine_config(self.spec, self.space, params, lease.env, cores)

    def experiment(self) -> dict[str, Any]:
        """What makes trials comparable: a study continues, and a trial folder is
        re-ingested, only with the same values."""
        spec = self.spec
        return {
            "model": model_ref(spec.model),
            "space": self.space.name,
            "workload": spec.workload.model_dump(mode="json"),
            "load": spec.load.model_dump(mode="json"),
            "slos": dict(spec.slos),
            "relative_slos": spec.relative_slos,
            "max_error_rate": spec.max_error_rate,
            "capacity": spec.capacity.model_dump() if spec.capacity else None,
            "scenario": spec.scenario,
        }

    def differs_from(self, stored: dict[str, Any]) -> str | None:
        """How the experiment `stored` (a study's attributes, a trial folder's record)
        differs from this one, e.g. `workload input=32, not input=64`; None where it does
        not. The bounds a baseline fixed (stored, where the spec holds their factors) and a
        key an older version did not store are not compared."""
        stored = dict(stored)
        relative = self.spec.relative_slos
        if isinstance(stored.get("slos"), dict):
            stored["slos"] = {k: v for k, v in stored["slos"].items() if k not in relative}
        stored.setdefault("relative_slos", {})  # a study of an older version had none
        ours: dict[str, Any] = json.loads(json.dumps(self.experiment(), default=str))
        for key, value in ours.items():
            if key in stored and stored[key] != value:
                return f"{key} {difference(stored[key], value)}"
        return None

    @contextmanager
    def leased(self, params: dict[str, Any]) -> Iterator[EngineConfig]:
        """The engine config of `params` on devices leased from the pool as a trial's are
        (the devices `--devices` allows, tensor x pipeline parallel of them), held until the
        block ends: for runs outside the study loop (the confirm step, a profile). Without a
        pool: the host as a whole, as the trials had it."""
        config = self.engine_config(params)
        if self.pool is None:
            whole = hold_host(self.cancel)
            try:
                yield config
            finally:
                whole.release()
            return
        with self.pool.acquire(config.devices) as lease:
            yield self.engine_config(params, lease)


def _rerun_requests(spec: TuneSpec, run: int) -> list[RequestSpec]:
    """Run `run`'s requests: the workload drawn again with its seed + `run` (a JSONL workload:
    its entries in another order), the same lengths and load, other prompts."""
    workload = spec.workload.model_copy(update={"seed": spec.workload.seed + run})
    return build_requests(workload, spec.model)[1]


def _check_fits(spec: TuneSpec, in_space: Any, requests: list[RequestSpec]) -> None:
    """A request longer than a fixed `max_model_len` is refused by vLLM in every trial: the
    study would measure nothing but errors, so it does not start."""
    fixed = spec.engine.options.get("max_model_len", in_space)
    if not isinstance(fixed, int) or isinstance(fixed, bool):
        return
    longest = longest_request(requests, spec.model)
    if longest is not None and longest > fixed:
        raise SpecError(
            f"workload: its longest request needs {longest} tokens (prompt + output), more "
            f"than max_model_len={fixed}: vLLM would refuse it in every trial; shorten the "
            "workload or raise max_model_len"
        )


def build_harness(spec: TuneSpec, *, lanes: bool = True, host: str | None = None) -> Harness:
    """The harness of `spec` on this machine. `lanes=False`: one trial at a time on the host
    as a whole (no device pool; the confirm step and profiles). Raises SpecError when the
    workload or the devices the spec asks for are not to be had here."""
    space = load_space(spec.space)
    pool, count = None, 1
    if lanes:
        try:
            pool, count = plan_lanes(
                space.platform, spec.parallel, spec.devices, busy_share=spec.busy_share
            )
        except DeviceError as exc:
            raise SpecError(str(exc)) from None
    # vLLM's batch defaults depend on the device it runs on: the pool's (the devices the user
    # selected, as read once for the pool), else the host's.
    facts = read_host_facts(space.platform, devices=pool.devices if pool is not None else None)
    space, baseline_note = on_this_host(space, facts, spec.scenario, dict(spec.engine.options))
    space, model = for_this_model(space, spec)
    if spec.baseline:  # trial 0 is what the user runs today (`--baseline`), not vLLM's defaults
        baseline_note = None
        for name, value in spec.baseline.items():  # before the study is made from them
            if (problem := value_problem(space.parameters, name, value)) is not None:
                raise SpecError(f"baseline.{name}: {problem}")
    _check_options(spec, space, facts)
    try:
        warmup, requests = build_requests(spec.workload, spec.model)
    except WorkloadError as exc:
        raise SpecError(f"workload: {exc}") from None
    _check_fits(spec, space.fixed.get("max_model_len"), [*warmup, *requests])
    bounds = StudyBounds.of(spec)
    plan = Workplan(
        warmup,
        requests,
        spec.load,
        bounds.values,  # a copy: each measure below reads the bounds of its moment
        spec.max_error_rate,
        hang_s=spec.engine.hang_timeout_s,
        deadline_s=spec.engine.benchmark_timeout_s,
        capacity=spec.capacity,
        repeats=spec.repeats,
        precision=spec.precision,
        scenario=spec.scenario,
        rerun=functools.cache(partial(_rerun_requests, spec)),
        device_cost_per_hour=spec.device_cost_per_hour,
        load_client=spec.load_client,
        tokenizer=spec.model,
        agreement=bounds.reference,  # the plan's at this moment; each measure takes its own
    )
    if spec.load_client == "vllm-bench":
        try:
            check_installed()
        except VllmBenchError as exc:
            raise SpecError(str(exc)) from None
    cancel = threading.Event()
    settings = LaunchSettings(
        command=spec.engine.command,
        offline_command=spec.engine.offline_command,
        startup_timeout_s=spec.engine.startup_timeout_s,
        cache_dir=spec.root / ".cache",
        cores=spec.engine.cores,
        platform=space.platform,
        cancel=cancel,
    )

    def measure_one(
        config: EngineConfig, trial_dir: Path, judge: Judge | None = None
    ) -> Measurement:
        now = dataclasses.replace(plan, slos=bounds.values, agreement=bounds.reference)
        return measure(config, trial_dir, now, settings, judge=judge)

    # The baseline's p99s fix the bounds relative to it: the median of BASELINE_RUNS runs, not
    # one p99 of a small workload, which is about its largest sample (docs/metrics.md).
    base_plan = plan
    if spec.relative_slos and plan.capacity is None and plan.scenario != "offline":
        base_plan = dataclasses.replace(plan, repeats=max(plan.repeats, BASELINE_RUNS))

    def measure_baseline(
        config: EngineConfig, trial_dir: Path, judge: Judge | None = None
    ) -> Measurement:
        now = dataclasses.replace(base_plan, slos=bounds.values, agreement=bounds.reference)
        return measure(config, trial_dir, now, settings, judge=judge)

    return Harness(
        spec,
        space,
        measure_one,
        baseline_measure=measure_baseline,
        device_memory=lambda ids: device_memory(space.platform, ids),
        pool=pool,
        lanes=count,
        cancel=cancel,
        requests_per_run=len(requests),
        host=host or socket.gethostname(),
        plan=plan,
        settings=settings,
        slo_bounds=bounds,
        baseline_note=baseline_note,
        layout=layout_names(space) if model is not None and model.is_moe else [],
    )


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


def _check_options(spec: TuneSpec, space: SearchSpace, host: HostFacts) -> None:
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
