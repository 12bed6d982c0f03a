"""What every command shares: the console, and one clear line per known error."""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from autotune.answer.selection import InfeasibleError, SelectionError
from autotune.bench import LOAD_CLIENTS, LoadClientError, LoadClientName, WorkloadError
from autotune.inputs.limits import MAX_CONFIRM, MAX_ROUNDS, MAX_SECONDS, bounded_problem
from autotune.inputs.userfiles import folder_problem, output_problem, path_problem
from autotune.inputs.wording import shown
from autotune.space import SpaceError
from autotune.spec import SpecError, storage_problem
from autotune.store import (
    NoStudiesError,
    StorageError,
    StoreSettings,
    StudyStore,
    default_storage_url,
    redact,
)
from autotune.study import StudyError, StudyMismatch

# The `--storage` and `--root` options of the commands that read a study.
StorageOpt = Annotated[
    str | None, typer.Option(help="SQLAlchemy URL (default: ROOT/STUDY/study.db)")
]
RootOpt = Annotated[Path, typer.Option(help="Folder for studies")]


def _console(stderr: bool = False) -> Console:
    """A console that keeps tables readable when output goes to a file or CI log."""
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else 160
    return Console(stderr=stderr, highlight=False, width=width)


console = _console()
err_console = _console(stderr=True)

# Exit codes (docs/guide.md, "Exit codes"): 0 done; 1 the study could not go on (the baseline
# failed, an engine outlived its teardown) or a check failed (`doctor`); 2 the input is wrong
# (spec, space, workload, model path, storage URL, flags); 3 the study ran but no measured
# config meets its constraints (the closest one is shown; `export --allow-infeasible`);
# 130 interrupted (Ctrl-C, SIGTERM): run the same command again to continue.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_INTERRUPTED = 130
INPUT_ERRORS: tuple[type[Exception], ...] = (
    SpecError,
    SpaceError,
    WorkloadError,
    StorageError,
    SelectionError,
    StudyMismatch,
)


class InputError(Exception):
    """Bad input found by the CLI itself (a missing model path, conflicting flags)."""


class CommandFailed(Exception):
    """The input was fine but the command could not do its job (exit 1), e.g. a benchmark
    in which no request completed."""


_BAD_INPUT: tuple[type[Exception], ...] = (*INPUT_ERRORS, InputError)
# The disk under the study, not the input: full, over quota, read-only, failing.
DISK_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn known errors into `error: ...` on stderr and an exit code; never a traceback."""
    try:
        yield
    except InfeasibleError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(EXIT_INFEASIBLE) from None
    except _BAD_INPUT as exc:
        err_console.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(EXIT_INPUT) from None
    except (StudyError, CommandFailed, LoadClientError) as exc:
        err_console.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(EXIT_FAILED) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # a name the checks at the edge did not see
            where = f": {escape(shown(exc.filename))}" if exc.filename else ""
            err_console.print(f"[bold red]error:[/] {exc.strerror}{where}", soft_wrap=True)
            raise typer.Exit(EXIT_INPUT) from None
        if exc.errno not in DISK_FAULTS:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        err_console.print(
            f"[bold red]error:[/] {exc.strerror or exc}{where}: the trial in progress is not "
            "recorded; every measured trial is kept; make room and run the same command again",
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_FAILED) from None
    except KeyboardInterrupt:
        err_console.print(
            "interrupted: the current engine was torn down and its trial recorded as "
            "interrupted; run the same command again to continue the study"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None


def parse_load_client(value: str) -> LoadClientName:
    """`--load-client`: one of LOAD_CLIENTS."""
    if value == "autotune":
        return "autotune"
    if value == "vllm-bench":
        return "vllm-bench"
    raise InputError(f"--load-client {value!r}: expected one of: {', '.join(LOAD_CLIENTS)}")


class PlainFormatter(logging.Formatter):
    """A log line among the CLI's own: `warning: ...`, as the CLI writes `error: ...` (no
    time stamp or logger name; `--verbose` shows those)."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def setup_logging(verbose: bool) -> None:
    import optuna

    handler = logging.StreamHandler()
    if verbose:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(PlainFormatter())
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    optuna.logging.set_verbosity(optuna.logging.INFO if verbose else optuna.logging.WARNING)


def storage_url(study: str, storage: str | None, root: Path) -> str:
    """The URL a reading command uses: `--storage`, else `ROOT/STUDY/study.db`; InputError
    for a path no file system holds, before anything is opened."""
    checked_name("study", study)
    if (problem := (path_problem if storage else folder_problem)(root)) is not None:
        raise InputError(f"--root {shown(root)}: {problem}")  # trial folders lie under it
    if storage:
        if (problem := storage_problem(storage)) is not None:
            raise InputError(f"--storage {shown(redact(storage))}: {problem}")
        return storage
    return default_storage_url(root, study)


def check_confirm(top: int, rounds: int) -> None:
    """`confirm --top K --rounds R`, bounded as the spec's `confirm` and `confirm_rounds`."""
    check_bounded("--top", top, 1, MAX_CONFIRM)
    check_bounded("--rounds", rounds, 1, MAX_ROUNDS)


def checked_store(storage: str | None, root: Path, study: str | None = None) -> None:
    """InputError for a `--storage`, `--root` or study name no file system holds (see
    `storage_url`)."""
    storage_url(study or "study", storage, root)


def checked_name(flag: str, path: str | Path) -> None:
    """InputError for a path (or a name that may be one) no file system holds."""
    if (problem := path_problem(path)) is not None:
        raise InputError(f"{flag} {shown(path)}: {problem}")


def checked_folder(flag: str, path: Path) -> Path:
    """`path`, a folder the user named; InputError when it cannot be one."""
    if (problem := folder_problem(path)) is not None:
        raise InputError(f"{flag} {shown(path)}: {problem}")
    return path


def checked_output(flag: str, path: Path) -> Path:
    """`path`, a file to write that the user named; InputError when it cannot be one."""
    if (problem := output_problem(path)) is not None:
        raise InputError(f"{flag} {shown(path)}: {problem}")
    return path


def check_bounded(flag: str, value: float, low: float, high: float, low_open: bool = False) -> None:
    """InputError `FLAG VALUE: expected ...` unless `low <= value <= high` (`low < value`)."""
    if (problem := bounded_problem(value, low, high, low_open=low_open)) is not None:
        raise InputError(f"{flag} {shown(value)}: {problem}")


def open_store(study: str, storage: str | None, root: Path, read_only: bool = False) -> StudyStore:
    """The store of an existing study, for commands that read it (`read_only`: and never
    write it) or join it."""
    url = storage_url(study, storage, root)
    try:
        return StudyStore(url, create=False, settings=store_settings(), read_only=read_only)
    except NoStudiesError as exc:
        raise NoStudiesError(f"no study named {study!r}: {exc}") from None


def open_tuning_store(url: str) -> StudyStore:
    """The store a study is tuned in (created if it is a new SQLite file)."""
    return StudyStore(url, settings=store_settings())


def store_settings() -> StoreSettings:
    """`AUTOTUNE_SQLITE_TIMEOUT_S` and `AUTOTUNE_HEARTBEAT_S`, read here, at the edge."""
    values = {
        "sqlite_timeout_s": _seconds("AUTOTUNE_SQLITE_TIMEOUT_S"),
        "heartbeat_s": _seconds("AUTOTUNE_HEARTBEAT_S"),
    }
    return StoreSettings(**{k: v for k, v in values.items() if v is not None})


def worker_host() -> str:
    """This worker's host as trials record it: `AUTOTUNE_WORKER_HOST` if set (a pod on a
    shared node, a test that plays two machines), else the host name."""
    return os.environ.get("AUTOTUNE_WORKER_HOST") or socket.gethostname()


def _seconds(name: str) -> float | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise InputError(f"{name}={value!r}: expected a number of seconds > 0")
    if seconds > MAX_SECONDS:  # inf too: a timer given it overflows
        raise InputError(f"{name}={value!r}: expected at most {MAX_SECONDS:,.0f} seconds")
    return seconds
