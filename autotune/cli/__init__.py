"""The `autotune` command line (typer). Thin: each command calls one library function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.cli import _spaces
from autotune.cli._bench import bench
from autotune.cli._common import InputError, check_bounded, checked_folder, cli_errors, console
from autotune.cli._confirm import confirm
from autotune.cli._dashboard import dashboard, report
from autotune.cli._devices import devices
from autotune.cli._doctor import doctor
from autotune.cli._logs import logs
from autotune.cli._predict import predict
from autotune.cli._profile import profile
from autotune.cli._results import export, show
from autotune.cli._size import size
from autotune.cli._studies import studies
from autotune.cli._tune import tune, worker
from autotune.cli._usage import run
from autotune.cli._version import print_version
from autotune.inputs.limits import MAX_SEED

app = typer.Typer(
    name="autotune",
    help="Find the best vLLM serving configuration for a model, hardware and workload.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
    # `-h` as well as `--help`, on every command (click passes it down to subcommands).
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=print_version,
            is_eager=True,
            help="Print the versions of autotune and of the installed vLLM, and exit",
        ),
    ] = False,
) -> None:
    """Find the best vLLM serving configuration for a model, hardware and workload."""


app.command()(tune)
app.command()(worker)
app.command()(confirm)
app.command()(show)
app.command()(studies)
app.command()(logs)
app.command()(export)
app.command()(predict)
app.command()(dashboard)
app.command()(report)
app.command()(profile)
app.command()(bench)
app.command()(size)
app.command()(devices)
app.command()(doctor)
app.add_typer(_spaces.app, name="spaces")


@app.command("make-tiny-model")
def make_tiny_model(
    path: Annotated[Path, typer.Argument(help="Folder to write the model to")],
    seed: Annotated[int, typer.Option(help="Weights and tokenizer seed")] = 0,
    dtype: Annotated[
        str, typer.Option(help="bfloat16 or float32 (one seed, one set of weights)")
    ] = "bfloat16",
    arch: Annotated[
        str, typer.Option(help="llama, or a mixture of experts: qwen3-moe or mixtral")
    ] = "llama",
    layers: Annotated[int, typer.Option(help="Decoder layers (1 for a draft model)")] = 4,
    quantize: Annotated[
        str | None, typer.Option(help="awq: the weights in AWQ 4-bit (llama only)")
    ] = None,
) -> None:
    """Write a tiny random-weight model (+ tokenizer) for the demo and the tests: a Llama, a
    mixture of experts, or an AWQ-quantized Llama; one seed, one tokenizer."""
    from autotune.tiny.model import ModelFolderError
    from autotune.tiny.model import make_tiny_model as make
    from autotune.tiny.quant import quantize_awq

    with cli_errors():
        check_bounded("--seed", seed, 0, MAX_SEED)
        check_bounded("--layers", layers, 1, 64)
        checked_folder("PATH", path)
        if quantize not in (None, "awq"):
            raise InputError(f"--quantize {quantize}: the one format written here is awq")
        if quantize is not None and arch != "llama":
            raise InputError(f"--quantize {quantize}: only the llama tiny model")
        try:
            make(path, seed=seed, dtype=dtype, arch=arch, layers=layers)
            if quantize == "awq":
                quantize_awq(path)
        except ModelFolderError as exc:
            raise InputError(str(exc)) from None
        what = f"AWQ 4-bit {arch}" if quantize else arch
        console.print(f"wrote a tiny random-weight {what} model to {path}")


def main() -> None:
    run(app)
