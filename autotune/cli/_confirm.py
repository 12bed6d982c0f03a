"""`autotune confirm`, and the confirm step `tune --confirm` runs: a study's best configs and
its baseline re-measured side by side in alternating rounds (autotune.study._confirm), with
progress and the step's table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.cli._common import (
    InputError,
    check_confirm,
    cli_errors,
    console,
    open_store,
    setup_logging,
    worker_host,
)
from autotune.cli._render import print_confirm
from autotune.cli._running import check_runnable, sigterm_as_interrupt
from autotune.measure import Measurement
from autotune.spec import load_spec
from autotune.store import StudyStore
from autotune.study import Confirmer, Harness, build_harness


def run_confirm(
    harness: Harness, store: StudyStore, top: int, rounds: int, table: bool = True
) -> None:
    """The confirm step (see autotune.study._confirm), with progress and (`table`) its table."""
    spec = harness.spec
    console.print(
        f"\nconfirm: the top {top} feasible configs and the baseline, {rounds} alternating rounds"
    )

    def progress(k: int, number: int, done: int, result: Measurement) -> None:
        value = "-" if result.summary is None else f"{result.summary.output_throughput:,.0f} tok/s"
        console.print(f"  round {k + 1}: trial {number} {result.status} {value}")

    confirmer = Confirmer.of(harness, store, on_run=progress)
    with sigterm_as_interrupt():
        confirmer.run(top, rounds)
    if table:
        print_confirm(console, store.study_facts(spec.study))


def confirm(
    study: Annotated[str, typer.Argument(help="Study name")],
    top: Annotated[int, typer.Option(help="Front configs to re-measure (plus the baseline)")] = 2,
    rounds: Annotated[int, typer.Option(help="Alternating rounds, at most")] = 6,
    storage: Annotated[str | None, typer.Option(help="SQLAlchemy URL (default: ROOT/STUDY)")] = (
        None
    ),
    root: Annotated[Path, typer.Option(help="Folder for studies")] = Path("studies"),
    while_running: Annotated[
        bool,
        typer.Option(
            "--while-running",
            help="Confirm a study that is still being tuned (its runs queue for the devices)",
        ),
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Re-measure a study's best configs and its baseline side by side, in alternating rounds,
    until a sequential interval decides: a config wins only on a gain over the baseline whose
    interval (90% over every look) is above 0 and not within the smallest gain worth deploying."""
    setup_logging(verbose)
    with cli_errors():
        check_confirm(top, rounds)
        store = open_store(study, storage, root)
        running = [t.number for t in store.trials(study) if t.status == "running"]
        if running and not while_running:
            raise InputError(
                f"study {study!r} is still being tuned (trial {running[0]} is running): its "
                "winner is not known yet; confirm it when the tune ends, or pass --while-running"
            )
        shared = store.study_facts(study).spec
        if shared is None:
            raise InputError(f"study {study!r} has no stored spec: it cannot be re-measured")
        local = {"study": study, "root": root, "storage": storage}
        spec = load_spec(None, {**shared, **local})
        check_runnable(spec)
        # The devices `--devices` gave the trials, leased as theirs were (`Harness.leased`).
        run_confirm(build_harness(spec, host=worker_host()), store, top, rounds)
