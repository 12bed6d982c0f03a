"""`engine.command_problem` and `engine.program_problem`: an engine command judged before a
study exists, by its words and by what this host has (issue 49). What they must let through
matters as much: every form the launcher and the docs use."""

from __future__ import annotations

import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from autotune.engine import (
    DEFAULT_COMMAND,
    DEFAULT_OFFLINE_COMMAND,
    OFFLINE_PLACEHOLDERS,
    SERVER_PLACEHOLDERS,
    command_problem,
    program_problem,
)
from autotune.inputs.wording import shown  # a long path is shown by its ends

FAKE = Path(__file__).resolve().parents[1] / "fake_engine.py"


@pytest.mark.parametrize(
    "command",
    [
        DEFAULT_COMMAND,
        f"{{python}} {FAKE}",
        "vllm serve --config={config} --port {port} --host {host} --uvicorn-log-level debug",
        "bash -c 'exec vllm serve ${EXTRA_ARGS}'",  # the shell's own braces
        "vllm serve --compilation-config '{\"level\": 3}'",  # JSON
        "numactl --cpunodebind 0 {python} -m vllm.entrypoints.openai.api_server",
    ],
)
def test_the_commands_a_server_is_started_with_pass(command: str) -> None:
    assert command_problem(command, SERVER_PLACEHOLDERS) is None


def test_the_offline_programs_placeholders_are_its_own() -> None:
    assert command_problem(DEFAULT_OFFLINE_COMMAND, OFFLINE_PLACEHOLDERS) is None
    whole = "prlimit --as=1 {python} b.py {config} --prompts {prompts} -o={out}"
    assert command_problem(whole, OFFLINE_PLACEHOLDERS) is None
    problem = command_problem("{python} b.py {config} {port}", OFFLINE_PLACEHOLDERS)
    assert problem is not None and problem.startswith("{port} is not a placeholder")


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("vllm serve --port {prot}", "{prot} is not a placeholder (did you mean '{port}'?)"),
        ("vllm serve {config} {config} {host} {port}", "{config} appears 2 times"),
        ("vllm serve --config {config}", "names {config} but not {port} and {host}"),
        ("vllm serve | tee log", "'|' is a shell operator"),
        ("vllm serve 2>&1", "'2>&1' is a shell operator"),
        ("vllm serve --model /m", "gives --model itself"),
        ("vllm serve --port=8000", "gives --port itself"),
    ],
)
def test_a_command_the_launcher_cannot_complete_is_named(command: str, says: str) -> None:
    problem = command_problem(command, SERVER_PLACEHOLDERS)
    assert problem is not None and says in problem, problem


def test_the_program_is_looked_for_as_the_launcher_would_run_it(tmp_path: Path) -> None:
    vllm = "-m vllm.entrypoints.openai.api_server"
    missing = f"{vllm}: {sys.executable} has no module named 'vllm'"
    assert program_problem(DEFAULT_COMMAND) == (None if find_spec("vllm") else missing)
    assert program_problem(f"{{python}} {FAKE} --x") is None
    assert program_problem("{python} -c 'print(1)'") is None
    assert program_problem("bash -c 'exit 0'") is None
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/sh\n")
    assert (
        program_problem(str(script))
        == f"{shown(script)}: not executable (chmod +x it, or start it with its interpreter)"
    )
    script.chmod(0o755)
    assert program_problem(f"{script} --x") is None
    assert program_problem(str(tmp_path)) == f"{shown(tmp_path)}: is a folder"
    assert program_problem("nosuchprog") == "nosuchprog: no such program on PATH"
    assert (
        program_problem(f"{{python}} {tmp_path}/x.py")
        == f"{shown(tmp_path / 'x.py')}: no such script"
    )
    problem = program_problem("{python} -m nosuchpackage.server")
    assert (
        problem == f"-m nosuchpackage.server: {sys.executable} has no module named 'nosuchpackage'"
    )
