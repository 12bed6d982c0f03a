"""`autotune profile`: re-run one trial's config with vLLM's torch profiler around a short
benchmark; print the top operators by self time and the prefill/decode split."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from autotune.answer.export import choose_export
from autotune.answer.selection import InfeasibleError
from autotune.cli._common import (
    InputError,
    check_bounded,
    cli_errors,
    console,
    err_console,
    open_store,
    setup_logging,
    worker_host,
)
from autotune.cli._running import check_runnable, sigterm_as_interrupt
from autotune.engine import installed_vllm_version
from autotune.inputs.limits import MAX_REQUESTS
from autotune.measure import ProfileError, ProfilePlan, profile_config
from autotune.spec import TuneSpec, load_spec
from autotune.store import StudyStore, TrialRecord
from autotune.study import build_harness
from autotune.vocab import layout


def profile(
    study: Annotated[str, typer.Argument(help="Study name")],
    trial: Annotated[
        int | None,
        typer.Option(help="Trial to profile (default: the winner `autotune export` picks)"),
    ] = None,
    requests: Annotated[
        int, typer.Option(help="Profiled requests: the first K of the study's workload")
    ] = 8,
    engine_command: Annotated[
        str | None, typer.Option(help="Server command template (default: the study's)")
    ] = None,
    storage: Annotated[str | None, typer.Option(help="SQLAlchemy URL (default: ROOT/STUDY)")] = (
        None
    ),
    root: Annotated[Path, typer.Option(help="Folder for studies")] = Path("studies"),
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Profile a trial's config: its engine with the torch profiler on, the workload's warm-up,
    then K requests profiled; traces and summary.json go to ROOT/STUDY/profiles/trial-NNNN/."""
    setup_logging(verbose)
    with cli_errors():
        check_bounded("--requests", requests, 1, MAX_REQUESTS)
        store = open_store(study, storage, root)
        spec = _stored_spec(store, study, storage, root, engine_command)
        number = _chosen_trial(store, study, trial)
        record = _trial_record(store.trials(study), study, number)
        check_runnable(spec)
        harness = build_harness(spec, host=worker_host())  # leases as the trial did
        assert harness.plan is not None and harness.settings is not None
        plan = ProfilePlan(
            warmup=harness.plan.warmup,
            requests=harness.plan.requests[:requests],
            load=spec.load,
            hang_s=spec.engine.hang_timeout_s,
            deadline_s=spec.engine.benchmark_timeout_s,
        )
        folder = layout.profile_dir(spec.study_dir, number)
        version = installed_vllm_version()
        console.print(
            f"profiling trial {number} of study [bold]{study}[/] ({record.description}): "
            f"{len(plan.requests)} requests after {len(plan.warmup)} warm-up, into {folder}"
        )
        try:
            with sigterm_as_interrupt(), harness.leased(record.params) as config:
                summary = profile_config(config, plan, harness.settings, folder, number, version)
        except ProfileError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("interrupted: the engine was torn down; no profile was written")
            raise typer.Exit(130) from None
        print_profile(console, summary)
        console.print(
            f"wrote {folder / layout.PROFILE_SUMMARY} and the trace {folder / summary['trace']}"
        )


def _stored_spec(
    store: StudyStore, study: str, storage: str | None, root: Path, engine_command: str | None
) -> TuneSpec:
    """The study's spec as stored by `autotune tune`, with this machine's paths."""
    shared = store.study_facts(study).spec
    if shared is None:
        raise InputError(f"study {study!r} has no stored spec: its trials cannot be re-run")
    local: dict[str, Any] = {"study": study, "root": root, "storage": storage}
    if engine_command:
        local["engine"] = {**(shared.get("engine") or {}), "command": engine_command}
    return load_spec(None, {**shared, **local})


def _chosen_trial(store: StudyStore, study: str, trial: int | None) -> int:
    """`--trial`, else the study's winner as `autotune export` picks it: the confirmed winner
    if the study has one, else the max-throughput pick from the feasible Pareto front."""
    if trial is not None:
        return trial
    try:
        chosen, _ = choose_export(store.trials(study), store.study_facts(study))
    except InfeasibleError as exc:
        raise InfeasibleError(
            f"{exc}: profile it with --trial {exc.closest}", exc.closest
        ) from None
    return chosen.number


def _trial_record(records: list[TrialRecord], study: str, number: int) -> TrialRecord:
    found = next((t for t in records if t.number == number), None)
    if found is None:
        raise InputError(f"no trial {number} in study {study!r}")
    if not found.config:
        status = f"{found.status}: {found.reason}".rstrip(": ")
        raise InputError(f"trial {number} has no engine config to profile ({status})")
    return found


def print_profile(out: Console, summary: dict[str, Any], rows: int = 20) -> None:
    """The top operators by self time, and the share of step time in prefill vs decode."""
    out.print(
        f"trial {summary['trial']}: top operators by self time over {summary['requests']} "
        "profiled requests (share: of all operators' self time in the worker's trace)"
    )
    table = Table()
    table.add_column("#", justify="right")
    table.add_column("operator", overflow="fold")
    table.add_column("self ms", justify="right")
    table.add_column("share", justify="right")
    for k, op in enumerate(summary["top_ops"][:rows], start=1):
        table.add_row(str(k), op["name"], f"{op['self_ms']:,.2f}", f"{op['share']:.1%}")
    out.print(table)
    phases = summary.get("phases")
    if phases is None:
        out.print(f"prefill vs decode: unknown: {summary.get('phases_note', '')}")
        return
    steps = phases["steps"]
    out.print(
        f"model step time: prefill {phases['prefill_share']:.1%} "
        f"({steps['prefill']} steps, {phases['prefill_ms']:,.1f} ms), "
        f"decode {phases['decode_share']:.1%} "
        f"({steps['decode']} steps, {phases['decode_ms']:,.1f} ms); "
        "a step with any prefill counts as prefill"
    )
