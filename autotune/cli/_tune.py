"""`autotune tune`: run a study from a spec file and flags."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.answer.selection import feasible_front
from autotune.bench import thin_percentiles
from autotune.cli._baseline import read_baseline, with_baseline
from autotune.cli._common import (
    EXIT_INFEASIBLE,
    InputError,
    cli_errors,
    console,
    err_console,
    open_store,
    open_tuning_store,
    setup_logging,
    store_settings,
    worker_host,
)
from autotune.cli._confirm import run_confirm
from autotune.cli._progress import event_printer, print_summary
from autotune.cli._render import print_front, print_infeasible
from autotune.cli._running import check_runnable, sigterm_as_interrupt
from autotune.cli._tune_flags import parse_parallel, tune_overrides
from autotune.devices import DevicePool, format_device_list
from autotune.engine import DEFAULT_COMMAND
from autotune.spec import TuneSpec, check_request, load_spec
from autotune.store import redact
from autotune.study import (
    StudyRunner,
    build_harness,
    check_warm_start,
)
from autotune.vocab.platform import Platform


def _spec(field: str) -> str:
    """A spec field's default as `--help` shows it (the flags default to None: not given)."""
    return str(TuneSpec.model_fields[field].get_default(call_default_factory=True))


# Options of every command that runs trials on this machine's devices.
ParallelOption = Annotated[
    str | None, typer.Option(help="Trials at once on disjoint devices: N or auto")
]
DevicesOption = Annotated[
    str | None, typer.Option(help="Device ids this machine's trials may use, e.g. 0-3,6")
]


def tune(
    ctx: typer.Context,
    study: Annotated[
        str | None, typer.Option(help="Study name (continues an existing one)")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model path or name")] = None,
    space: Annotated[
        str | None,
        typer.Option(help="Search-space YAML or shipped name", show_default=_spec("space")),
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            help="random:input=256,output=64,prompts=64 | jsonl:path=F",
            show_default="random:input=256,output=64,prompts=64,warmup=2",
        ),
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="Poisson arrival rate, requests/s", show_default="8.0")
    ] = None,
    concurrency: Annotated[int | None, typer.Option(help="Requests in flight (cap)")] = None,
    scenario: Annotated[
        str | None,
        typer.Option(
            help="online: a server under load (default); offline: one vllm.LLM batch, "
            "maximize tokens/s"
        ),
    ] = None,
    load: Annotated[
        str | None,
        typer.Option(
            help="fixed: measure at --rate; capacity: search each config's highest rate "
            "within the SLOs"
        ),
    ] = None,
    slo: Annotated[
        list[str] | None,
        typer.Option(
            help="METRIC=BOUND (p99_ttft_ms=2000) or METRIC=baseline*FACTOR "
            "(p99_tpot_ms=baseline*1.2: at most 20% above what the baseline measures)"
        ),
    ] = None,
    objective: Annotated[
        list[str] | None, typer.Option(help="METRIC:max|min (default: throughput, p99 TTFT/TPOT)")
    ] = None,
    trials: Annotated[
        int | None,
        typer.Option(help="Launched trials in the study, in all", show_default=_spec("trials")),
    ] = None,
    option: Annotated[
        list[str] | None, typer.Option(help="Fixed vLLM option KEY=VALUE (YAML value)")
    ] = None,
    engine_command: Annotated[
        str | None, typer.Option(help="Server command template", show_default=DEFAULT_COMMAND)
    ] = None,
    served_model_name: Annotated[str | None, typer.Option(help="Name clients send")] = None,
    storage: Annotated[
        str | None,
        typer.Option(help="SQLAlchemy URL of the study store", show_default="ROOT/STUDY/study.db"),
    ] = None,
    root: Annotated[
        Path | None, typer.Option(help="Folder for studies", show_default=_spec("root"))
    ] = None,
    search: Annotated[
        str | None,
        typer.Option(
            help="goal: search for the first objective under the SLOs (default); pareto: "
            "every objective alike"
        ),
    ] = None,
    sampler: Annotated[
        str | None,
        typer.Option(help="auto | tpe | gp | random | nsga2", show_default=_spec("sampler")),
    ] = None,
    remeasure: Annotated[
        str | None,
        typer.Option(
            help="auto | on | off: run the incumbent config again, so that a drifting host "
            "or a lucky run does not pick the winner (auto: on for a goal search)",
            show_default=_spec("remeasure"),
        ),
    ] = None,
    screen: Annotated[
        str | None,
        typer.Option(
            help="auto | on | off: predict each proposal with the engine model fitted to the "
            "study's own trials and launch none it rules out (docs/prediction.md)",
            show_default=_spec("screen"),
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Sampler and workload seed", show_default=_spec("seed"))
    ] = None,
    repair: Annotated[
        bool | None,
        typer.Option(
            "--repair/--no-repair", help="Retry an OOM trial once with less memory (linked)"
        ),
    ] = None,
    parallel: ParallelOption = None,
    devices: DevicesOption = None,
    warm_start: Annotated[
        str | None,
        typer.Option(help="Another study whose Pareto configs a new study runs first"),
    ] = None,
    reingest: Annotated[
        bool | None,
        typer.Option(
            "--reingest",
            help="A new study whose trial folders hold measurements (its database lost) "
            "records them first",
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            help="What you run today, as trial 0 of a new study: a `vllm serve` script "
            "(exports included) or a --config YAML"
        ),
    ] = None,
    device_cost_per_hour: Annotated[
        float | None,
        typer.Option(
            help="Cost of one device per hour (a GPU, an NPU; on CPU the host): then "
            "cost_per_mtok is measured (objective cost_per_mtok:min)"
        ),
    ] = None,
    repeats: Annotated[
        int | None, typer.Option(help="Batches per trial on its engine, at least (pooled)")
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option(
            help="Each run goes on until precise: off, or throughput=0.05,slo=0.1,"
            "max_s=240,max_batches=20 (docs/metrics.md)"
        ),
    ] = None,
    min_agreement: Annotated[
        float | None,
        typer.Option(
            help="Greedy outputs of fixed prompts compared with the baseline's: a config whose "
            "share of agreeing tokens is lower is infeasible (0: measure only)"
        ),
    ] = None,
    load_client: Annotated[
        str | None,
        typer.Option(
            help="Who sends the measured requests: autotune (default) or vllm-bench "
            "(`vllm bench serve`, vLLM's own client; see docs/metrics.md)"
        ),
    ] = None,
    prune: Annotated[
        bool | None,
        typer.Option(
            "--prune/--no-prune",
            help="Stop a trial early once it is surely infeasible or dominated by the front",
        ),
    ] = None,
    confirm: Annotated[
        int | None,
        typer.Option(
            help="Re-measure the top K front configs and the baseline in alternating rounds "
            "at the end; pick the winner by median minus spread"
        ),
    ] = None,
    confirm_rounds: Annotated[
        int | None,
        typer.Option(help="Rounds of --confirm, at most", show_default=_spec("confirm_rounds")),
    ] = None,
    min_gain: Annotated[
        float | None,
        typer.Option(help="Smallest gain worth deploying", show_default=_spec("min_gain")),
    ] = None,
    spec: Annotated[Path | None, typer.Option(help="tune.yaml holding any of these fields")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Tune a vLLM server: search the space, measure every trial, keep the Pareto front."""
    setup_logging(verbose)
    with cli_errors():
        overrides = tune_overrides(ctx.params)
        imported = read_baseline(baseline) if baseline is not None else None
        defaults = {"model": imported.model} if imported and imported.model else {}
        tune_spec = load_spec(spec, overrides, defaults)
        if imported is not None and baseline is not None:
            tune_spec = with_baseline(tune_spec, imported, baseline)
        check_request(tune_spec)
        check_runnable(tune_spec)
        run_tune(tune_spec)


def worker(
    study: Annotated[str, typer.Option(help="Name of the study to join")],
    storage: Annotated[str, typer.Option(help="SQLAlchemy URL of the shared study store")],
    root: Annotated[Path, typer.Option(help="Folder for this machine's trial folders")] = Path(
        "studies"
    ),
    parallel: ParallelOption = None,
    devices: DevicesOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Join a study from another machine: run its trials here until its budget is spent.

    The study is the one `autotune tune` created in a shared store (PostgreSQL); its spec
    (model, space, workload, budget) is read from there. The model path must exist here.
    """
    setup_logging(verbose)
    with cli_errors():
        shared = open_store(study, storage, root).study_facts(study).spec
        if shared is None:
            raise InputError(
                f"study {study!r} has no stored spec (it was not created by `autotune tune` "
                "of this version): continue it with `autotune tune` instead"
            )
        local: dict[str, Any] = {"study": study, "storage": storage, "root": root}
        if parallel is not None:
            local["parallel"] = parse_parallel(parallel)
        if devices is not None:
            local["devices"] = devices
        tune_spec = load_spec(None, {**shared, **local})
        check_runnable(tune_spec)
        run_tune(tune_spec, join=True)


def run_tune(spec: TuneSpec, join: bool = False) -> None:
    """Run the study of `spec`, printing progress and, at the end, the Pareto front. `join`:
    as one of several workers of a study that exists (`autotune worker`)."""
    harness = build_harness(spec, host=worker_host())
    check_warm_start(harness, store_settings())  # before the store: a bad flag creates nothing
    store = open_tuning_store(spec.storage_url)
    pool = harness.machine.pool
    at_once = f", {harness.machine.lanes} at a time on {_ids(pool)}" if pool is not None else ""
    console.print(
        f"study [bold]{spec.study}[/]: {spec.trials} trials of space {harness.space.name!r} "
        f"on {spec.model}{at_once}; store {redact(spec.storage_url)}"
    )
    for line in percentile_warnings(spec):
        err_console.print(f"warning: {line}", soft_wrap=True, markup=False)
    runner = StudyRunner(harness, store, event_printer(console), join=join)
    with sigterm_as_interrupt():
        result = runner.run()
    print_summary(console, result)
    records, facts = store.trials(spec.study), store.study_facts(spec.study)
    feasible = bool(feasible_front(records, facts))
    # The front is printed once, last: after the confirm step, with its winner marked and its
    # table (`show` prints the same).
    try:
        if spec.confirm and not join and feasible and not result.interrupted:
            run_confirm(harness, store, spec.confirm, spec.confirm_rounds, table=False)
    finally:
        records, facts = store.trials(spec.study), store.study_facts(spec.study)
        print_front(console, spec.study, records, facts)
    if result.interrupted:
        raise KeyboardInterrupt
    print_infeasible(console, spec.study, records, facts)
    if spec.confirm and not join and not feasible:
        console.print("\nconfirm: skipped, no feasible config to re-measure")
    if not feasible:
        raise typer.Exit(EXIT_INFEASIBLE)


def percentile_warnings(spec: TuneSpec) -> list[str]:
    """One line per SLO on a percentile that a trial's pooled requests are too few to
    measure: a sized run's cap of batches, `repeats`, or a capacity level's one run
    (`autotune.bench.thin_percentiles`; docs/metrics.md, Percentiles)."""
    prompts, batches = spec.workload.prompts, spec.repeats if spec.capacity is None else 1
    if spec.precision is not None:
        batches = spec.precision.max_batches
    requests = None if prompts is None else prompts * batches
    lines = []
    for thin in thin_percentiles([*spec.slos, *spec.relative_slos], requests):
        few = round(thin.above)
        rests = "about the largest of them" if few <= 1 else f"set by the largest {few} of them"
        lines.append(
            f"{thin.metric} over {thin.requests:,} requests is {rests} ({thin.above:.1f} samples "
            f"above the p{thin.q:g}); an SLO on it needs >= {thin.needed:,} requests to be "
            "stable (docs/metrics.md, Percentiles)"
        )
    return lines


def _ids(pool: DevicePool) -> str:
    if pool.platform == Platform.CPU:
        return " | ".join(f"cores {device.cores}" for device in pool.devices)
    return format_device_list([device.id for device in pool.devices])
