"""Where a study's files are: the one owner of a trial folder's name and of the files in it.

    ROOT/STUDY/                       the study folder (`TuneSpec.study_dir`)
      study.db                        the SQLite store (the default storage)
      trial-0007/                     one folder per trial, its number zero-padded
        engine.yaml  engine.env       exactly what was launched (`vllm serve --config`, its env)
        engine.log   engine.1.log     the engine's output (a retry after a port clash: .1, .2)
        engine.pid                    the running engine's process group (gone once torn down)
        requests.jsonl                one record per measured request
        runs/run-K.jsonl              with repeats: the records of each run
        levels/run-K.jsonl            with a capacity search: the records of each level run
        capacity.json                 the capacity search's levels
        voided/run-K.jsonl            runs voided by a stall of the tuner itself (kept, not used)
        prompts.jsonl  result.json    offline: the batch's prompts and the child's result
        measurement.json              the outcome, written before the store records it
        greedy.json                   with --min-agreement: greedy outputs of fixed prompts
        trial.json                    what the trial ran (parameters, origin, the study's
                                      settings): a lost database is re-ingested from it
      confirm/STAMP/round-K/trial-0007/   the confirm step's runs (a trial folder each)
      profiles/trial-0007/            `autotune profile`: summary.json, traces, engine.log

Everything that writes or reads one of these names takes it from here.
"""

from __future__ import annotations

from pathlib import Path

TRIAL_PREFIX = "trial-"
ENGINE_CONFIG = "engine.yaml"
ENGINE_ENV = "engine.env"
ENGINE_LOG = "engine.log"
ENGINE_PID = "engine.pid"
REQUESTS = "requests.jsonl"
RUNS_DIR = "runs"
LEVELS_DIR = "levels"
CAPACITY = "capacity.json"
VOIDED_DIR = "voided"
PROMPTS = "prompts.jsonl"
OFFLINE_RESULT = "result.json"
MEASUREMENT = "measurement.json"
GREEDY = "greedy.json"
TRIAL_RECORD = "trial.json"
CONFIRM_DIR = "confirm"
PROFILES_DIR = "profiles"
PROFILE_SUMMARY = "summary.json"
PROFILER_TABLE = "profiler_out.txt"


def trial_name(number: int) -> str:
    """`trial-0007`: the folder name of trial `number`."""
    return f"{TRIAL_PREFIX}{number:04d}"


def trial_dir(study_dir: Path, number: int) -> Path:
    """The folder of trial `number` of the study in `study_dir`."""
    return study_dir / trial_name(number)


def engine_log(attempt: int = 0) -> str:
    """The log of the engine's `attempt`-th start (a port clash starts it again)."""
    return ENGINE_LOG if attempt == 0 else f"engine.{attempt}.log"


def run_records(k: int) -> str:
    """The records file of the `k`-th run (under RUNS_DIR, LEVELS_DIR or VOIDED_DIR)."""
    return f"run-{k}.jsonl"


def confirm_run_dir(study_dir: Path, stamp: str, round_k: int, number: int) -> Path:
    """The folder of trial `number`'s run in round `round_k` of the confirm step `stamp`."""
    return study_dir / CONFIRM_DIR / stamp / f"round-{round_k}" / trial_name(number)


def profile_dir(study_dir: Path, number: int) -> Path:
    """The folder of `autotune profile`'s run of trial `number`."""
    return study_dir / PROFILES_DIR / trial_name(number)
