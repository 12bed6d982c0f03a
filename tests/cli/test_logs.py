"""`autotune logs`: which trial's log, where it is, and `--follow` until the trial ends."""

from __future__ import annotations

import io
import itertools
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from support import Ran

from autotune.cli._common import InputError
from autotune.cli._logs import choose_trial, follow, log_path, next_attempt, wait_for_log
from autotune.store import (
    DEVICE_S,
    REASON,
    STATUS,
    TRIAL_DIR,
    StudyStore,
    TrialRecord,
    default_storage_url,
)
from autotune.vocab import layout
from autotune.vocab.status import TrialStatus


def record(number: int, state: str = "complete", status: str = "ok", **kw: object) -> TrialRecord:
    return TrialRecord(number=number, state=state, status=status, **kw)


def one_error(result: Ran) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- which trial (pure) ----------------------------------------------------------------------


def test_an_asked_trial_is_that_one() -> None:
    records = [record(0), record(1, "running", "running")]
    choice = choose_trial("s", records, 0, lambda t: True)
    assert choice.trial.number == 0 and choice.notice == ""


def test_by_default_the_newest_running_trial() -> None:
    records = [record(0), record(1, "running", "running"), record(2, "running", "running")]
    choice = choose_trial("s", records, None, lambda t: False)
    assert choice.trial.number == 2 and choice.notice == ""


def test_none_running_the_last_trial_with_a_log_and_a_notice() -> None:
    records = [record(0), record(1, status="oom"), record(2, status="invalid_config")]
    choice = choose_trial("s", records, None, lambda t: t.number < 2)
    assert choice.trial.number == 1
    assert choice.notice == (
        "no trial is running; showing trial 1 (oom), the last one with an engine log"
    )


def test_an_unknown_trial_or_no_log_at_all_is_input_error() -> None:
    with pytest.raises(InputError, match=r"study 's' has no trial 7 \(its trials: 0-1\)"):
        choose_trial("s", [record(0), record(1)], 7, lambda t: True)
    with pytest.raises(InputError, match="no trial of study 's' has an engine log yet"):
        choose_trial("s", [record(0)], None, lambda t: False)


# --- where the log is ------------------------------------------------------------------------


def test_the_log_is_the_latest_start_in_the_recorded_folder_else_the_study_folder(
    tmp_path: Path,
) -> None:
    study_dir = tmp_path / "studies" / "s"
    own = layout.trial_dir(study_dir, 3)
    own.mkdir(parents=True)
    assert log_path(record(3), study_dir) is None
    (own / layout.ENGINE_LOG).write_text("first start\n")
    assert log_path(record(3), study_dir) == own / layout.ENGINE_LOG
    (own / layout.engine_log(1)).write_text("after a port clash\n")
    assert log_path(record(3), study_dir) == own / "engine.1.log"
    # A recorded folder that is not here (a relative --root elsewhere): the study folder's.
    assert log_path(record(3, trial_dir="elsewhere/trial-0003"), study_dir) == own / "engine.1.log"
    moved = tmp_path / "kept"
    moved.mkdir()
    (moved / layout.ENGINE_LOG).write_text("kept\n")
    assert log_path(record(3, trial_dir=str(moved)), study_dir) == moved / layout.ENGINE_LOG
    assert next_attempt(own / "engine.log").name == "engine.1.log"
    assert next_attempt(own / "engine.1.log").name == "engine.2.log"


# --- following (pure: a fake sleep writes the log and ends the trial) ------------------------


def test_follow_copies_new_lines_and_the_next_start_until_the_trial_ends(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"one\n")
    script = [
        lambda: log.open("ab").write(b"two\r\n"),
        lambda: (tmp_path / "engine.1.log").write_bytes(b"three\n"),
        lambda: (tmp_path / "engine.1.log").open("ab").write(b"four\n"),
    ]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if script:
            script.pop(0)()

    asked: list[int] = []

    def running() -> bool:
        asked.append(len(sleeps))
        if len(sleeps) >= 6:
            (tmp_path / "engine.1.log").open("ab").write(b"last words\n")
            return False
        return True

    out = io.BytesIO()
    follow(log, running, out, sleep=sleep)
    assert out.getvalue() == b"one\ntwo\r\nthree\nfour\nlast words\n"
    assert set(sleeps) == {0.2}
    assert asked[0] == 0 and all(b - a == 5 for a, b in itertools.pairwise(asked))


def test_waiting_for_a_log_ends_with_the_trial() -> None:
    ends = iter([True, False])
    assert wait_for_log(lambda: None, lambda: next(ends), sleep=lambda s: None) is None
    found = iter([None, None, Path("engine.log")])
    assert wait_for_log(lambda: next(found), lambda: True, sleep=lambda s: None) == Path(
        "engine.log"
    )


# --- the command, as a process ---------------------------------------------------------------


def make_study(root: Path, name: str = "s") -> optuna.Study:
    """A study of trial 0 (measured, its log in its folder), trial 1 (never launched) and
    trial 2 (running, its log being written)."""
    store = StudyStore(default_storage_url(root, name))
    study, _ = store.create_or_load(name, ["maximize"], optuna.samplers.RandomSampler(seed=0))
    measured = study.ask()
    folder = layout.trial_dir(root / name, 0)
    folder.mkdir(parents=True)
    (folder / layout.ENGINE_LOG).write_text("INFO engine 0 started\nINFO engine 0 stopped\n")
    measured.set_user_attr(STATUS, TrialStatus.OK)
    measured.set_user_attr(TRIAL_DIR, str(folder))
    measured.set_user_attr(DEVICE_S, 3.0)
    study.tell(measured, [100.0])
    skipped = study.ask()
    skipped.set_user_attr(STATUS, TrialStatus.INVALID_CONFIG)
    skipped.set_user_attr(REASON, "max_num_batched_tokens (902) must be >= max_model_len")
    study.tell(skipped, [0.0])
    return study


def test_logs_prints_the_running_trials_log_else_the_last_one(
    tmp_path: Path, autotune_here: Callable[..., Ran]
) -> None:
    root = tmp_path / "studies"
    study = make_study(root)
    result = autotune_here("logs", "s", "0", "--root", root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "INFO engine 0 started\nINFO engine 0 stopped\n"
    result = autotune_here("logs", "s", "--root", root)  # none running: trial 0, with a notice
    assert result.returncode == 0, result.stderr
    assert result.stdout == "INFO engine 0 started\nINFO engine 0 stopped\n"
    assert "no trial is running; showing trial 0 (ok)" in result.stderr
    running = study.ask()
    folder = layout.trial_dir(root / "s", running.number)
    folder.mkdir()
    (folder / layout.ENGINE_LOG).write_text("INFO engine 2 starting\n")
    result = autotune_here("logs", "s", "--root", root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "INFO engine 2 starting\n" and result.stderr == ""


def test_logs_bad_input_is_one_error_line(
    tmp_path: Path, autotune_here: Callable[..., Ran]
) -> None:
    root = tmp_path / "studies"
    make_study(root)
    line = one_error(autotune_here("logs", "s", "9", "--root", root))
    assert line == "error: study 's' has no trial 9 (its trials: 0-1)"
    line = one_error(autotune_here("logs", "s", "1", "--root", root))
    assert line.startswith("error: trial 1 was never launched (invalid_config: ")
    line = one_error(autotune_here("logs", "nope", "--root", root))
    assert "no study database at" in line and "nope" in line
    (layout.trial_dir(root / "s", 0) / layout.ENGINE_LOG).unlink()
    line = one_error(autotune_here("logs", "s", "0", "--root", root))
    assert line.startswith("error: trial 0 (ok) has no engine log yet (looked in ")


def test_follow_prints_new_lines_until_the_trial_ends(tmp_path: Path) -> None:
    root = tmp_path / "studies"
    study = make_study(root)
    trial = study.ask()
    folder = layout.trial_dir(root / "s", trial.number)
    folder.mkdir()
    log = folder / layout.ENGINE_LOG
    log.write_text("line 1\n")
    follower = subprocess.Popen(
        [sys.executable, "-m", "autotune", "logs", "s", "--follow", "--root", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == b"line 1\n"  # printed at once
        for k in range(2, 5):
            with log.open("a") as f:
                f.write(f"line {k}\n")
            assert follower.stdout.readline() == f"line {k}\n".encode()  # as it comes
        with log.open("a") as f:
            f.write("shutting down\n")
        time.sleep(0.3)
        assert follower.poll() is None  # still running: so is the trial
        ended = time.monotonic()
        study.tell(trial, [50.0])
        out, err = follower.communicate(timeout=120)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    assert out == b"shutting down\n"
    assert time.monotonic() - ended < 60  # noticed by its polls of the store (1 s), not never
