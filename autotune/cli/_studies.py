"""`autotune studies`: one line per study, read-only, from ROOT/*/study.db or one storage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from autotune.answer.trial_data import StudySummary, study_summary
from autotune.cli._common import (
    InputError,
    checked_store,
    cli_errors,
    console,
    err_console,
    store_settings,
)
from autotune.store import StorageError, StudyStore, default_storage_url, redact
from autotune.vocab.numbers import readable


def _summaries(store: StudyStore) -> Iterator[StudySummary]:
    for info in store.studies():
        yield study_summary(info.name, store.trials(info.name), info.facts)


def _read_only(url: str) -> StudyStore:
    return StudyStore(url, read_only=True, settings=store_settings())


def find_studies(root: Path, storage: str | None) -> tuple[list[StudySummary], list[str]]:
    """Every study in `storage`, else in each `ROOT/*/study.db`, by name; and a line for
    each file skipped because it is no study database (a broken `--storage` is an error)."""
    if storage is not None:
        return sorted(_summaries(_read_only(storage)), key=lambda s: s.name), []
    if not root.is_dir():
        raise InputError(f"no folder {root} (pass --root, or --storage for a database)")
    found: list[StudySummary] = []
    skipped = []
    for db in sorted(p for p in root.glob("*/study.db") if p.is_file()):
        url = default_storage_url(db.parent.parent, db.parent.name)
        try:
            found.extend(_summaries(_read_only(url)))
        except StorageError as exc:
            reason = str(exc).removeprefix(f"storage {redact(url)}: ")
            detail = "" if str(db) in reason else f" ({reason})"  # the driver's own words
            skipped.append(f"skipped {db}: not an autotune (Optuna) study database{detail}")
    return sorted(found, key=lambda s: s.name), skipped


def _table(summaries: list[StudySummary]) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("study", "measured", "winner out tok/s", "created"):
        right = col in ("measured", "best out tok/s")
        table.add_column(col, justify="right" if right else "left", no_wrap=True)
    for s in summaries:
        best = "-" if s.best_throughput is None else readable(s.best_throughput)
        if s.best_trial is not None:
            best += f" (trial {s.best_trial})"
        created = s.created.replace("T", " ")[:16]
        table.add_row(s.name, f"{s.measured}/{s.total}", best, created)
    return table


def studies(
    storage: Annotated[
        str | None,
        typer.Option(help="SQLAlchemy URL: list every study in it (default: ROOT/*/study.db)"),
    ] = None,
    root: Annotated[Path, typer.Option(help="Folder for studies")] = Path("studies"),
) -> None:
    """List the studies: trials measured, best throughput, when each was created.

    Best: the highest output tok/s of a trial that meets every constraint. Databases are
    opened read-only: nothing is ever written, and a file that holds no study is skipped.
    """
    with cli_errors():
        checked_store(storage, root)
        summaries, skipped = find_studies(root, storage)
        for line in skipped:
            err_console.print(line, soft_wrap=True, markup=False)
        if not summaries:
            where = redact(storage) if storage else f"{root}/*/study.db"
            console.print(f"no study in {where}")
            return
        console.print(_table(summaries))
