"""What a spec's fields ask of each other, one rule each, in the order they run: a
contradiction is refused (one line, as a pydantic error), and what a scenario, a trace or a
capacity search implies is completed (the offline objectives, a trace's arrivals, a warm-up of
as many requests as the load keeps in flight). `SpecFields` runs `RULES` once it is built."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.bench import (
    LoadProfile,
    VllmBenchError,
    check_workload,
    warmup_for,
)
from autotune.engine import DEFAULT_COMMAND
from autotune.spec._fields import SpecFields
from autotune.spec._file import OFFLINE_ENGINE_COMMAND
from autotune.vocab.objectives import (
    CAPACITY_OBJECTIVES,
    DEFAULT_OBJECTIVES,
    OFFLINE_OBJECTIVES,
    Objective,
)

Complete = Callable[[str, Any], None]  # sets a field while the spec is validated


def relative_slos(spec: SpecFields, complete: Complete) -> None:
    both = sorted(set(spec.slos) & set(spec.relative_slos))
    if both:
        raise ValueError(f"SLO {both[0]} is given twice: as a bound and as baseline*FACTOR")
    if spec.relative_slos and spec.capacity is not None:
        raise ValueError(
            "a baseline-relative SLO needs the baseline measured at a fixed load; a capacity "
            "search measures each config at the highest rate within absolute SLOs"
        )
    return


def offline(spec: SpecFields, complete: Complete) -> None:
    if spec.scenario != "offline":
        return
    gate = spec.min_agreement is not None
    for name, value in (("--load capacity", spec.capacity), ("--prune", spec.prune),
                        ("--min-agreement", gate)):  # fmt: skip
        if value:
            raise ValueError(f"{name} applies to online trials, not to an offline batch")
    if spec.repeats > 1:
        raise ValueError("--repeats applies to online trials: an offline trial is one batch")
    if spec.engine.command != DEFAULT_COMMAND:  # refused, never ignored: see _file
        raise ValueError(OFFLINE_ENGINE_COMMAND)
    if [(o.metric, o.direction) for o in spec.objectives] == list(DEFAULT_OBJECTIVES):
        complete("objectives", [Objective(metric=m, direction=d) for m, d in OFFLINE_OBJECTIVES])
    return


def warm_as_loaded(spec: SpecFields, complete: Complete) -> None:
    """A workload that does not set its warm-up warms the engine with as many requests as
    the load keeps in flight (`warmup_for`); a capacity search, an offline batch and a
    vllm-bench run measure one way each: no batches there."""
    if "warmup" not in spec.workload.model_fields_set and spec.workload.type != "trace":
        warm = warmup_for(spec.load, spec.workload.prompts or 0)
        complete("workload", spec.workload.model_copy(update={"warmup": warm}))
    if spec.precision is not None and (spec.capacity is not None or spec.scenario == "offline"):
        complete("precision", None)
    return


def vllm_bench_can_send(spec: SpecFields, complete: Complete) -> None:
    if spec.load_client != "vllm-bench":
        return
    if spec.scenario == "offline":
        raise ValueError("--load-client applies to online trials: an offline batch has none")
    if spec.prune:
        raise ValueError(
            "--prune needs each request as it ends: vllm bench serve reports at its end; "
            "use --load-client autotune"
        )
    try:
        check_workload(spec.workload)
    except VllmBenchError as exc:
        raise ValueError(str(exc)) from None
    return


def trace_sets_its_arrivals(spec: SpecFields, complete: Complete) -> None:
    if getattr(spec.workload, "type", None) != "trace":
        return
    if spec.capacity is not None:
        raise ValueError("a trace sets its own arrivals: it cannot be replayed at other rates")
    if "load" in spec.model_fields_set and spec.load.rate is not None:
        raise ValueError(
            "a trace sets its own arrivals: drop --rate (scale them with rate_scale=N)"
        )
    load = spec.load if "load" in spec.model_fields_set else LoadProfile(trace=True)
    complete("load", load.model_copy(update={"rate": None, "trace": True}))
    return


def served_name(spec: SpecFields, complete: Complete) -> None:
    """`served_model_name` given as an engine option is the name clients send: the spec's
    own field, so that the load client asks for the name the engine serves."""
    options = dict(spec.engine.options)
    served = options.pop("served_model_name", None)
    if "served_model_name" in spec.engine.options:  # the engine's options without it
        complete("engine", spec.engine.model_copy(update={"options": options}))
    if isinstance(served, list):
        served = served[0] if served else None
    if served is None:
        return
    if spec.served_model_name not in (None, str(served)):
        raise ValueError(
            f"served_model_name {spec.served_model_name!r} and the engine option "
            f"served_model_name={served!r} differ: give it once"
        )
    complete("served_model_name", str(served))
    return


def capacity_needs_slos(spec: SpecFields, complete: Complete) -> None:
    names = {o.metric for o in spec.objectives} | set(spec.slos)
    if "peak_memory_gib" in names and spec.scenario != "offline":
        raise ValueError("peak_memory_gib is measured only in the offline scenario")
    if "cost_per_mtok" in names and spec.device_cost_per_hour is None:
        raise ValueError("cost_per_mtok needs --device-cost-per-hour (what a device costs)")
    if spec.capacity is None:
        if "capacity_rps" in names:
            raise ValueError("capacity_rps is measured only with a capacity search")
        return
    if not spec.slos:
        raise ValueError("a capacity search needs at least one SLO (--slo p99_ttft_ms=...)")
    if [(o.metric, o.direction) for o in spec.objectives] == list(DEFAULT_OBJECTIVES):
        complete("objectives", [Objective(metric=m, direction=d) for m, d in CAPACITY_OBJECTIVES])
    return


RULES: tuple[Callable[[SpecFields, Complete], None], ...] = (
    relative_slos,
    offline,
    warm_as_loaded,
    vllm_bench_can_send,
    trace_sets_its_arrivals,
    served_name,
    capacity_needs_slos,
)
