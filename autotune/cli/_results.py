"""`autotune show` and `autotune export`: read a study, print its front, write the YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.answer.export import choose_export, control_characters, export_trial
from autotune.answer.selection import PICKS, InfeasibleError
from autotune.answer.trial_data import flat_columns, flat_row, trial_rows
from autotune.cli._common import InputError, RootOpt, StorageOpt, cli_errors, console, open_store
from autotune.cli._render import print_front
from autotune.cli._table import Format, rows_csv, rows_json


def show(
    study: Annotated[str, typer.Argument(help="Study name")],
    all_trials: Annotated[bool, typer.Option("--all", help="Every trial, not the front")] = False,
    output_format: Annotated[
        Format,
        typer.Option(
            "--format",
            help="table: the front (or --all) for reading; json, csv: every trial as data "
            "(columns: docs/metrics.md)",
        ),
    ] = Format.TABLE,
    storage: StorageOpt = None,
    root: RootOpt = Path("studies"),
) -> None:
    """Print the study's Pareto front (or every trial) with its measurements."""
    with cli_errors():
        store = open_store(study, storage, root, read_only=True)
        records = store.trials(study)
        facts = store.study_facts(study)
        if output_format is Format.TABLE:
            print_front(console, study, records, facts, show_all=all_trials)
            return
        rows = trial_rows(records, facts)
        if output_format is Format.JSON:
            typer.echo(rows_json(rows))
        else:
            flat = [flat_row(r) for r in rows]
            typer.echo(rows_csv(flat, flat_columns(rows)), nl=False)


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
    allow_infeasible: Annotated[
        bool,
        typer.Option(
            "--allow-infeasible",
            help="When no trial meets every SLO, export the one closest to them (marked "
            "INFEASIBLE in its header)",
        ),
    ] = False,
    output: Annotated[Path, typer.Option("-o", "--output", help="YAML file to write")] = Path(
        "best.yaml"
    ),
    storage: StorageOpt = None,
    root: RootOpt = Path("studies"),
) -> None:
    """Write a trial's config as a `vllm serve --config` YAML (and an env file if needed)."""
    with cli_errors():
        _check_output(output)
        if output.is_dir():
            raise InputError(f"-o {output}: is a folder; name the YAML file, e.g. -o best.yaml")
        store = open_store(study, storage, root, read_only=True)
        facts = store.study_facts(study)
        records = store.trials(study)
        try:
            chosen, how = choose_export(records, facts, pick_rule, trial, allow_infeasible)
        except InfeasibleError as exc:
            hint = f"pass --allow-infeasible to export it, or --trial {exc.closest}"
            raise InfeasibleError(f"{exc}: {hint}", exc.closest) from None
        try:
            done = export_trial(study, chosen, facts, output, how)
        except OSError as exc:
            raise InputError(f"-o {output}: cannot write: {exc.strerror or exc}") from None
        _say(f"wrote {done.yaml_path} (trial {chosen.number}, {how})")
        if done.env_path is not None:
            _say(f"wrote {done.env_path} (engine environment)")
        _say(f"serve it with:\n  {done.command}")


def _say(line: str) -> None:
    """`line` as it is: no rich markup (`[b]`) or emoji code (`:x:`) read in a path, and a
    command never wrapped in two, so that it pastes as printed."""
    console.print(line, markup=False, emoji=False, soft_wrap=True)


def _check_output(output: Path) -> None:
    """Refuse an `-o` path that would break the lines it is printed and written in: a line
    break in it would end the YAML header's comment and start a key of the config."""
    bad = control_characters(str(output))
    if bad:
        chars = ", ".join(repr(c) for c in dict.fromkeys(bad))
        raise InputError(
            f"-o {str(output)!r}: a file name with a control character ({chars}) would break "
            "the serve command and the YAML header that name it; name the file without one"
        )
