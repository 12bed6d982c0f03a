"""`autotune size`: the fewest devices that hold a request rate within a capacity study's SLOs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.answer.sizing import size_for
from autotune.cli._common import (
    InputError,
    RootOpt,
    StorageOpt,
    check_bounded,
    cli_errors,
    console,
    open_store,
)
from autotune.inputs.limits import MAX_PARALLEL, MAX_PRICE, MAX_RATE, MAX_TRIALS
from autotune.vocab.slo import slo_text


def size(
    study: Annotated[str, typer.Argument(help="A capacity study (tune --load capacity)")],
    rate: Annotated[float, typer.Option(help="Requests/s to serve within the study's SLOs")],
    devices_per_host: Annotated[
        int | None, typer.Option(help="Devices of one host, to count hosts too")
    ] = None,
    device_cost_per_hour: Annotated[
        float | None, typer.Option(help="Cost of one device per hour, to price each answer")
    ] = None,
    top: Annotated[int, typer.Option(help="Configs to list")] = 5,
    storage: StorageOpt = None,
    root: RootOpt = Path("studies"),
) -> None:
    """The fewest devices (tensor x pipeline parallel x replicas) that hold --rate."""
    with cli_errors():
        check_bounded("--rate", rate, 0, MAX_RATE, low_open=True)
        if devices_per_host is not None:
            check_bounded("--devices-per-host", devices_per_host, 1, MAX_PARALLEL)
        if device_cost_per_hour is not None:
            check_bounded("--device-cost-per-hour", device_cost_per_hour, 0, MAX_PRICE, True)
        check_bounded("--top", top, 1, MAX_TRIALS)
        store = open_store(study, storage, root)
        facts = store.study_facts(study)
        if facts.capacity is None:
            raise InputError(
                f"study {study} measured no capacity: size needs a study run with --load capacity"
            )
        rows = size_for(store.trials(study), rate, devices_per_host)
        slos = slo_text(facts.all_slos)
        if not rows:
            raise InputError(f"no config of study {study} held any rate within {slos}")
        console.print(
            f"{rate:g} req/s within {slos}, from study {study}'s measured capacities:",
            markup=False,
        )
        for row in rows[:top]:
            hosts = "" if row.hosts is None else f" on {row.hosts} host(s)"
            price = (
                ""
                if device_cost_per_hour is None
                else f", {row.devices * device_cost_per_hour:,.2f} per hour"
            )
            console.print(
                f"  trial {row.number}: {row.replicas} x {row.per_replica} device(s) = "
                f"{row.devices} devices{hosts}{price} (capacity {row.capacity_rps:.2f} req/s "
                f"each; {row.description})",
                soft_wrap=True,
                markup=False,
            )
        best = rows[0]
        console.print(f"fewest devices: {best.devices} (trial {best.number})", markup=False)
