"""Usage errors through the real entry point (`autotune.cli.main`'s `run`): one line each."""

from __future__ import annotations

import pytest

from autotune.cli import app
from autotune.cli._usage import run
from autotune.inputs.wording import plain_text


def run_code(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        run(app, args)
    code = exit_.value.code
    return code if isinstance(code, int) else 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["tune", "--trails", "3"],
            "error: autotune tune: no such option --trails (did you mean '--trials'?); "
            "see 'autotune tune --help'",
        ),
        (["tnue"], "error: autotune: no such command 'tnue' (did you mean 'tune'?)"),
        (["show"], "error: autotune show: missing argument 'study'"),
        (["tune", "--rate", "fast"], "invalid value for '--rate': expected a number;"),
        (["dashboard", "--port", "-1"], "invalid value for '--port': expected a number >= 0;"),
    ],
)
def test_a_usage_error_is_one_line(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_code(args, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and line in lines[0], err


def test_a_command_that_succeeds_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_code(["spaces", "list"], capsys)
    assert code == 0 and err == ""


def test_pydantic_phrases_become_plain_words() -> None:
    assert plain_text("Input should be greater than 0") == "expected a number > 0"
    assert plain_text("Input should be a valid integer, unable to parse string") == (
        "expected a whole number"
    )
    assert plain_text("Value error, bad thing") == "bad thing"
