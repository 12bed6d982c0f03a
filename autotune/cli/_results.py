"""`autotune show` and `autotune export`: read a study, print its front, write the YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.cli._common import cli_errors, console, open_store
from autotune.cli._render import print_front
from autotune.export import choose_export, export_trial
from autotune.selection import PICKS

StorageOpt = Annotated[str | None, typer.Option(help="SQLAlchemy URL (default: ROOT/STUDY)")]
RootOpt = Annotated[Path, typer.Option(help="Folder for studies")]


def show(
    study: Annotated[str, typer.Argument(help="Study name")],
    all_trials: Annotated[bool, typer.Option("--all", help="Every trial, not the front")] = False,
    storage: StorageOpt = None,
    root: RootOpt = Path("studies"),
) -> None:
    """Print the study's Pareto front (or every trial) with its measurements."""
    with cli_errors():
        store = open_store(study, storage, root)
        records = store.trials(study)
        print_front(console, study, records, store.study_attrs(study), show_all=all_trials)


def export(
    study: Annotated[str, typer.Argument(help="Study name")],
    pick_rule: Annotated[
        str | None,
        typer.Option(
            "--pick",
            help=f"Rule over the front: {' | '.join(PICKS)} (default: the confirmed winner "
            "if the study has one, else max-throughput)",
        ),
    ] = None,
    trial: Annotated[int | None, typer.Option(help="Export this trial instead")] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="YAML file to write")] = Path(
        "best.yaml"
    ),
    storage: StorageOpt = None,
    root: RootOpt = Path("studies"),
) -> None:
    """Write a trial's config as a `vllm serve --config` YAML (and an env file if needed)."""
    with cli_errors():
        store = open_store(study, storage, root)
        attrs = store.study_attrs(study)
        chosen, how = choose_export(store.trials(study), attrs, pick_rule, trial)
        done = export_trial(study, chosen, attrs, output, how)
        console.print(f"wrote {done.yaml_path} (trial {chosen.number}, {how})")
        if done.env_path is not None:
            console.print(f"wrote {done.env_path} (engine environment)")
        console.print(f"serve it with:\n  {done.command}")
