"""`autotune spaces`: list the shipped search spaces and validate files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from autotune.cli._common import cli_errors, console
from autotune.space import list_spaces, load_space

app = typer.Typer(help="List and validate search spaces.", no_args_is_help=True)


@app.command("list")
def list_() -> None:
    """The shipped search spaces."""
    with cli_errors():
        table = Table("name", "platform", "parameters", "description", title="search spaces")
        for path in list_spaces():
            space = load_space(path)
            names = ", ".join(p.name for p in space.parameters)
            table.add_row(space.name, space.platform, names, space.description)
        console.print(table)


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(help="Search-space YAML files")],
) -> None:
    """Check search-space files; exit 2 with one line per error on the first bad one."""
    with cli_errors():
        for path in paths:
            space = load_space(path)
            console.print(f"{path}: ok ({len(space.parameters)} parameters, {space.platform})")
