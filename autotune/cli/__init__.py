"""The `autotune` command line (typer). Thin: each command calls one library function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.cli import _spaces
from autotune.cli._bench import bench
from autotune.cli._common import cli_errors, console
from autotune.cli._dashboard import dashboard, report
from autotune.cli._devices import devices
from autotune.cli._profile import profile
from autotune.cli._results import export, show
from autotune.cli._tune import confirm, tune, worker

app = typer.Typer(
    name="autotune",
    help="Find the best vLLM serving configuration for a model, hardware and workload.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command()(tune)
app.command()(worker)
app.command()(confirm)
app.command()(show)
app.command()(export)
app.command()(dashboard)
app.command()(report)
app.command()(profile)
app.command()(bench)
app.command()(devices)
app.add_typer(_spaces.app, name="spaces")


@app.command("make-tiny-model")
def make_tiny_model(
    path: Annotated[Path, typer.Argument(help="Folder to write the model to")],
    seed: Annotated[int, typer.Option(help="Weights and tokenizer seed")] = 0,
) -> None:
    """Write the tiny random-weight Llama (+ tokenizer) used by the demo and the tests."""
    from autotune.tinymodel import make_tiny_model as make

    with cli_errors():
        make(path, seed=seed)
        console.print(f"wrote a tiny random-weight Llama to {path}")


def main() -> None:
    app()
