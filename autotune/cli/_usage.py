"""Usage errors (an unknown command or option, a missing argument, a value of the wrong type)
as one `error:` line on stderr, like every other error of the CLI, instead of click's
usage block and panel; with "did you mean" where a close name exists."""

from __future__ import annotations

import re
import sys
from typing import NoReturn

import typer
from rich.text import Text

from autotune.cli._common import EXIT_FAILED, EXIT_OK, err_console
from autotune.inputs.wording import did_you_mean, plain_text

PROG = "autotune"


def run(app: typer.Typer, args: list[str] | None = None) -> NoReturn:
    """Run `app` as the `autotune` command and exit with its code."""
    try:
        code = app(args=args, prog_name=PROG, standalone_mode=False)
    except typer.TyperException as exc:  # typer's click errors derive from it
        # `autotune` alone: typer has printed the help already (exit 2, as click does).
        if type(exc).__name__ != "NoArgsIsHelpError":
            print_error(usage_line(exc))
        sys.exit(exc.exit_code)
    except typer.Abort:
        print_error("aborted")
        sys.exit(EXIT_FAILED)
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def print_error(message: str) -> None:
    """`error: MESSAGE` on stderr, one line (the message is not read as markup)."""
    err_console.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)


def usage_line(exc: typer.TyperException) -> str:
    """One line: the command, what is wrong in plain words, and where the usage is."""
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else PROG
    option = getattr(exc, "option_name", None)
    if hasattr(exc, "possibilities") and isinstance(option, str):  # click's NoSuchOption
        hint = did_you_mean(option, getattr(exc, "possibilities", None) or [])
        message = f"no such option {option}{hint}"
    else:
        message = plain_text(exc.format_message()).rstrip(".")
        message = re.sub(r"\. Did you mean '([^']+)'\?$", r" (did you mean '\1'?)", message)
        message = message[:1].lower() + message[1:]
    return f"{where}: {message}; see '{where} --help'"
