"""`autotune devices`: the devices the tuner would use here, as a table or as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from autotune.cli._common import InputError, cli_errors, console
from autotune.devices import (
    DeviceError,
    Inventory,
    discover_selected,
    run_tool,
)

# Where sysfs and procfs are read. Tests replace this and `run_tool` (the device tools' runner).
ROOT = Path("/")

_GIB = 1 << 30


def devices(
    platform: Annotated[
        str, typer.Option(help="auto (npu-smi, else nvidia-smi, else the CPU), cpu, cuda, ascend")
    ] = "auto",
    device_list: Annotated[
        str | None,
        typer.Option("--devices", help="Only these device ids, e.g. 0-3,6", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False,
) -> None:
    """List the devices the tuner may use: id, name, memory, NUMA node and cores."""
    with cli_errors():
        try:
            inventory = discover_selected(platform, device_list, run=run_tool, root=ROOT)
        except DeviceError as err:
            raise InputError(str(err)) from None
        if as_json:
            typer.echo(json.dumps(inventory.to_dict(), indent=2))
        else:
            console.print(_table(inventory))


def _table(inventory: Inventory) -> Table:
    title = f"{inventory.platform} devices ({inventory.source})"
    table = Table(title=title, title_justify="left")
    table.add_column("id", justify="right")
    table.add_column("name", overflow="fold")
    table.add_column("memory total", justify="right")
    table.add_column("used", justify="right")
    table.add_column("NUMA", justify="right")
    table.add_column("cores", overflow="fold")
    for d in inventory.devices:
        numa = "-" if d.numa_node is None else str(d.numa_node)
        memory = (_gib(d.total_bytes), _gib(d.used_bytes))
        table.add_row(str(d.id), d.name, *memory, numa, d.cores or "-")
    return table


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / _GIB:.1f} GiB"
