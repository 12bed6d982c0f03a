"""`autotune --version`, `-h` on every command, and defaults shown in `--help`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import pytest
import typer

from autotune.cli import app
from autotune.cli._version import version_text
from autotune.devices import vllm_distributions
from cli.conftest import invoke


def commands(
    group: Any = None, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command of the CLI (subcommands of `spaces` too) as (path, click command)."""
    group = group if group is not None else typer.main.get_command(app)
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def test_version_as_a_process() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "autotune", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"autotune {metadata.version('vllm-autotune')}"
    assert lines[1:] == [f"{n} {v}" for n, v in vllm_distributions().items()] or lines[1:] == [
        "vLLM not installed"
    ]


def test_version_names_vllm_without_importing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("autotune.cli._version.vllm_distributions", lambda: {"vllm": "9.9.9"})
    assert version_text().splitlines()[1:] == ["vllm 9.9.9"]
    monkeypatch.setattr("autotune.cli._version.vllm_distributions", dict)
    assert version_text().splitlines()[1:] == ["vLLM not installed"]
    code = "import autotune.cli._version as v, sys; v.version_text(); print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_dash_h_is_help_on_every_command() -> None:
    found = list(commands())
    assert {("logs",), ("studies",), ("show",), ("spaces", "list")} <= {p for p, _ in found}
    for path, _ in [((), None), *found]:
        short, long = invoke(*path, "-h"), invoke(*path, "--help")
        assert short.exit_code == 0, (path, short.output)
        assert "Usage:" in short.stdout and short.stdout == long.stdout, path


def test_every_help_fits_80_columns_and_cuts_no_word() -> None:
    # Issue 33: at 80 columns rich's tables cut `--device-cost-per-hour` to
    # `--device-cost-per-ho…` and a workload's example to `random:input=256,out…`.
    from typer.testing import CliRunner

    from autotune.cli import app

    for path, _ in [((), None), *commands()]:
        done = CliRunner().invoke(app, [*path, "--help"], terminal_width=80)
        assert done.exit_code == 0, (path, done.output)
        long = [line for line in done.stdout.splitlines() if len(line) > 80]
        assert not long and "…" not in done.stdout, (path, long)
    tune = CliRunner().invoke(app, ["tune", "--help"], terminal_width=80).stdout
    assert "--device-cost-per-hour <float>" in tune


def test_every_option_with_a_default_shows_it() -> None:
    for path, command in commands():
        for param in command.params:
            shown = getattr(param, "show_default", True)
            if param.param_type_name == "option" and param.default not in (None, False):
                assert shown, f"autotune {' '.join(path)} {param.opts[0]}: default hidden"
    result = invoke("logs", "--help")
    assert "[default: studies]" in " ".join(result.stdout.split())
    result = invoke("show", "--help")
    assert "[default: table]" in " ".join(result.stdout.split())
