"""`autotune logs`: a trial's engine log, and with `--follow` its new lines while it runs."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, BinaryIO

import typer
from optuna.trial import TrialState

from autotune.cli._common import EXIT_INTERRUPTED, InputError, cli_errors, err_console, open_store
from autotune.store import StudyStore, TrialRecord, storage_errors
from autotune.vocab import layout

FILE_POLL_S = 0.2  # how often a followed log is read for new lines
STORE_POLL_S = 1.0  # how often the store is asked whether the followed trial still runs
_CHUNK = 1 << 16
_MAX_ATTEMPTS = 100  # engine.K.log: far more starts than a trial's port retries make


@dataclass(frozen=True)
class LogChoice:
    """The trial whose log to print, and a notice for stderr when it was not asked for."""

    trial: TrialRecord
    notice: str = ""


def is_running(t: TrialRecord) -> bool:
    return t.state == TrialState.RUNNING.name.lower()


def choose_trial(
    study: str,
    records: Sequence[TrialRecord],
    number: int | None,
    has_log: Callable[[TrialRecord], bool],
) -> LogChoice:
    """Trial `number`; by default the running trial (the newest if several run), else the
    last trial that has a log (`has_log`), with a notice that says so. InputError when there
    is no such trial."""
    if number is not None:
        found = next((t for t in records if t.number == number), None)
        if found is None:
            known = f"0-{max(t.number for t in records)}" if records else "none"
            raise InputError(f"study {study!r} has no trial {number} (its trials: {known})")
        return LogChoice(found)
    running = [t for t in records if is_running(t)]
    if running:
        return LogChoice(max(running, key=lambda t: t.number))
    logged = [t for t in records if has_log(t)]
    if not logged:
        raise InputError(f"no trial of study {study!r} has an engine log yet")
    last = max(logged, key=lambda t: t.number)
    return LogChoice(
        last,
        f"no trial is running; showing trial {last.number} ({last.status}), "
        "the last one with an engine log",
    )


def trial_folders(t: TrialRecord, study_dir: Path) -> list[Path]:
    """Where the trial's files may be: the folder it recorded (relative to the tuner's working
    directory, if its `--root` was), then `ROOT/STUDY/trial-NNNN` (a running trial has not
    recorded its folder yet)."""
    own = layout.trial_dir(study_dir, t.number)
    stored = [Path(t.trial_dir)] if t.trial_dir else []
    return [*stored, own] if own not in stored else stored


def log_path(t: TrialRecord, study_dir: Path) -> Path | None:
    """The trial's latest engine log (an engine started again after a port clash writes
    `engine.1.log`, ...); None when it has none here."""
    for folder in trial_folders(t, study_dir):
        logs = [folder / layout.engine_log(k) for k in range(_MAX_ATTEMPTS)]
        found = [p for p in logs if p.is_file()]
        if found:
            return found[-1]
    return None


def next_attempt(path: Path) -> Path:
    """The log the engine's next start would write, beside `path`."""
    for k in range(_MAX_ATTEMPTS):
        if layout.engine_log(k) == path.name:
            return path.with_name(layout.engine_log(k + 1))
    return path.with_name(layout.engine_log(_MAX_ATTEMPTS))


def copy_new(log: BinaryIO, out: BinaryIO) -> None:
    """What `log` has beyond its position, to `out`."""
    while chunk := log.read(_CHUNK):
        out.write(chunk)
    out.flush()


def follow(
    path: Path,
    still_running: Callable[[], bool],
    out: BinaryIO,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Copy `path` to `out`, then the lines written to it (and to the log of the engine's next
    start, should it start again) every FILE_POLL_S, until `still_running()`, asked every
    STORE_POLL_S, says the trial is over; what the log holds by then is copied in full."""
    polls_per_ask = max(1, round(STORE_POLL_S / FILE_POLL_S))
    polls = 0
    log = path.open("rb")
    try:
        while True:
            copy_new(log, out)
            following = next_attempt(Path(log.name))
            if following.is_file():
                log.close()
                log = following.open("rb")
                continue
            if polls % polls_per_ask == 0 and not still_running():
                copy_new(log, out)
                return
            polls += 1
            sleep(FILE_POLL_S)
    finally:
        log.close()


def wait_for_log(
    find: Callable[[], Path | None],
    still_running: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
) -> Path | None:
    """The log `find` finds once it is there (a trial just started has none for a moment);
    None if the trial ends first."""
    polls_per_ask = max(1, round(STORE_POLL_S / FILE_POLL_S))
    polls = 0
    while (path := find()) is None:
        if polls % polls_per_ask == 0 and not still_running():
            return find()
        polls += 1
        sleep(FILE_POLL_S)
    return path


def no_log(t: TrialRecord, folders: Sequence[Path]) -> InputError:
    """Why trial `t` has no log to print, as the error to raise."""
    where = ", ".join(str(f) for f in folders)
    if not is_running(t) and t.device_s is None and t.state == "complete":
        why = f": {t.reason}" if t.reason else ""
        return InputError(f"trial {t.number} was never launched ({t.status}{why}); it has no log")
    return InputError(f"trial {t.number} ({t.status}) has no engine log yet (looked in {where})")


def _trial_running(store: StudyStore, study: str, number: int) -> Callable[[], bool]:
    loaded = store.load(study)

    def running() -> bool:
        with storage_errors(store.url):
            live = loaded.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return any(t.number == number for t in live)

    return running


def logs(
    study: Annotated[str, typer.Argument(help="Study name")],
    trial: Annotated[
        int | None,
        typer.Argument(
            help="Trial number (default: the running trial, else the last one with a log)",
            show_default=False,
        ),
    ] = None,
    follow_log: Annotated[
        bool,
        typer.Option("--follow", "-f", help="Print new lines as they come, until the trial ends"),
    ] = False,
    storage: Annotated[
        str | None, typer.Option(help="SQLAlchemy URL (default: ROOT/STUDY/study.db)")
    ] = None,
    root: Annotated[Path, typer.Option(help="Folder for studies (and their trial folders)")] = Path(
        "studies"
    ),
) -> None:
    """Print a trial's engine log (engine.log in its trial folder)."""
    out = sys.stdout.buffer
    with cli_errors():
        store = open_store(study, storage, root)
        records = store.trials(study)
        study_dir = root / study
        choice = choose_trial(study, records, trial, lambda t: log_path(t, study_dir) is not None)
        t = choice.trial
        if choice.notice:
            err_console.print(choice.notice, soft_wrap=True)
        running = _trial_running(store, study, t.number) if follow_log else None
        path = log_path(t, study_dir)
        try:
            if path is None and running is not None and is_running(t):
                err_console.print(f"waiting for trial {t.number}'s engine log ...")
                path = wait_for_log(lambda: log_path(t, study_dir), running)
            if path is None:
                raise no_log(t, trial_folders(t, study_dir))
            if running is None:
                with path.open("rb") as log:
                    copy_new(log, out)
            else:
                follow(path, running, out)
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None  # like `tail -f`: nothing to undo
        except BrokenPipeError:
            # The reader left (`autotune logs demo | head`): end quietly, as `cat` does.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
