"""`autotune doctor`: one line per check of the host, each with its fix; exit 1 if one fails."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from autotune.cli._common import (
    EXIT_FAILED,
    InputError,
    checked_name,
    checked_store,
    cli_errors,
    console,
    setup_logging,
)
from autotune.devices import run_tool
from autotune.doctor import Check, HostInputs, run_checks

# Where sysfs and procfs are read. Tests replace this and `run_tool` (the device tools' runner).
SYSTEM_ROOT = Path("/")

_LABELS = {"ok": ("ok", "green"), "warn": ("warn", "yellow"), "fail": ("FAIL", "bold red")}


def doctor(
    model: Annotated[
        str | None, typer.Option(help="Model folder to check (config, tokenizer, weights' size)")
    ] = None,
    storage: Annotated[
        str | None, typer.Option(help="SQLAlchemy URL to check (default: SQLite under ROOT)")
    ] = None,
    root: Annotated[Path, typer.Option(help="Folder for studies")] = Path("studies"),
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log what is read")] = False,
) -> None:
    """Check that this host can tune: Python, vLLM, devices, ports, storage, model, leftovers."""
    with cli_errors():
        setup_logging(verbose)
        checked_store(storage, root)
        if model is not None:
            checked_name("--model", model)
        host = HostInputs(
            root=SYSTEM_ROOT, run=run_tool, cpu_kvcache_space_gib=_kvcache_space_gib()
        )
        checks = run_checks(model, storage, root, host)
    for check in checks:
        console.print(line(check), soft_wrap=True, highlight=False)
    if not all(check.ok for check in checks):
        raise typer.Exit(EXIT_FAILED)


def line(check: Check) -> Text:
    """`ok    python 3.11.9`, `FAIL  storage ...: unreachable (...) — fix: ...`."""
    label, style = _LABELS[check.status]
    text = Text.assemble((f"{label:<6}", style), f"{check.name} {check.detail}")
    if check.status != "ok" and check.fix:
        text.append(f" — fix: {check.fix}")
    return text


def _kvcache_space_gib() -> float | None:
    """`VLLM_CPU_KVCACHE_SPACE` (GiB, vLLM's legacy CPU KV-cache size), read here, at the edge."""
    value = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "").strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        raise InputError(f"VLLM_CPU_KVCACHE_SPACE={value!r}: expected a number of GiB") from None
