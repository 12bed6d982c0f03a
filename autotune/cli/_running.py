"""What every command that runs trials on this machine shares: the host can start them (the
model folder, the engine's program), checked before anything is created; and SIGTERM taken as
Ctrl-C, so that a scheduler's stop tears engines down and records what was measured."""

from __future__ import annotations

import shlex
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from autotune.cli._common import InputError
from autotune.engine import program_problem
from autotune.spec import TuneSpec


def check_runnable(spec: TuneSpec) -> None:
    """InputError when this host cannot start `spec`'s trials: its model path, or the program
    its engine command (the offline batch program offline) starts (`engine.program_problem`),
    before anything is created."""
    check_model(spec.model)
    offline = spec.scenario == "offline"
    command = spec.engine.offline_command if offline else spec.engine.command
    if (problem := program_problem(command)) is not None:
        where = "engine.offline_command" if offline else "--engine-command (engine.command)"
        raise InputError(f"{where}: {problem}")


def check_model(model: str) -> None:
    looks_local = model.startswith((".", "/", "~")) or Path(model).exists()
    folder = Path(model).expanduser()
    if looks_local and not (folder / "config.json").is_file():
        if folder.exists():  # a folder of something else: never suggest writing into it
            raise InputError(f"model path {model} has no config.json (not a Hugging Face model)")
        hint = f"; create the demo model with `autotune make-tiny-model {shlex.quote(model)}`"
        raise InputError(f"model path {model} does not exist{hint}")


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler, `kill`) stops the study as Ctrl-C does: engine torn down, trial
    recorded as interrupted, summary printed, exit 130. From the first SIGTERM on, SIGTERM is
    ignored (SIG_IGN, which Python's exit does not reset as it resets a handler): a scheduler's
    second one would cut the teardown short, or kill the exiting process with 143."""
    stopping = False

    def interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        if not stopping:
            signal.signal(signal.SIGTERM, previous)
