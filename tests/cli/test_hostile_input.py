"""Input that passed validation and then failed deep inside (issue 32), run in-process: each is
one `error:` line, exit 2, and nothing is created under the root. Plus the option that must
change what the load client asks for (`served_model_name`), on the fake engine."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
import pytest
import typer
from support import one_error_line
from typer.testing import Result

from autotune.cli._common import cli_errors
from autotune.inputs.limits import MAX_TRIALS
from autotune.store import StudyStore, lowest_free

if TYPE_CHECKING:
    from tests.cli.conftest import Tuned

Invoke = Callable[..., Result]
TuneArgv = Callable[..., list]

SPEC = """\
study: hostile
model: {model}
space: cpu-quick
workload: random:input=32,output=8,prompts=8,warmup=1
load: {{rate: 100}}
root: {root}
"""


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--trials", "100000000000"], f"--trials 100000000000: expected a number <= {MAX_TRIALS}"),
        (["--option", "max_model_len=64 --enforce-eager"], "give each vLLM option its own"),
        (["--option", "max_model_len=--help"], "'--help' holds a flag"),
        (["--option", "max_model_len=1k"], "max_model_len: '1k' is not a whole number"),
        (["--option", "enforce_eager=yes"], "enforce_eager: 'yes' is not true or false"),
        (["--option", "x=[unclosed"], "'[unclosed' is not a YAML value"),
        (["--slo", "p99_ttft_ms=inf"], "a bound must be a finite number > 0"),
        (["--space", "{spec}"], "a tune spec (it has `study` or `model`): pass it as --spec"),
        (["--spec", "{space}"], "a search space (it has `parameters`): pass it as --space"),
        (
            [
                "--workload",
                "random:input=2000,output=8,prompts=4",
                "--option",
                "max_model_len=1024",
            ],
            "its longest request needs 2010 tokens (prompt + output), more than max_model_len=1024",
        ),
        (["--seed", "-1"], "--seed -1: expected a number >= 0"),
        (["--option", "not_an_option=3"], "--option not_an_option: not an option of vLLM"),
        (
            ["--workload", "/data/prompts.jsonl"],
            "(a file of prompts: jsonl:path=/data/prompts.jsonl; a trace: trace:path=",
        ),
        # Issue 45, by class. Numbers from the user, bounded where they enter.
        (["--seed", "4294967296"], "--seed 4294967296: expected a number <= 4294967295"),
        (["--concurrency", "10000000000"], "--concurrency 10000000000: expected a number <="),
        (["--repeats", "1000000"], "--repeats 1000000: expected a number <= 100"),
        (["--confirm", "99999999999"], "--confirm 99999999999: expected a number <= 1000"),
        (["--confirm-rounds", "101"], "--confirm-rounds 101: expected a number <= 100"),
        (["--parallel", "100000"], "--parallel 100000: expected a number from 1 to 1024, or"),
        (["--workload", "random:prompts=99999999999"], "workload key 'prompts': expected a"),
        (["--workload", "random:output=99999999999"], "workload key 'output': expected a"),
        (["--workload", "random:seed=4294967296"], "workload key 'seed': expected a number <="),
        (["--workload", "random:input=99999,prompts=99999"], "tokens to generate, more than"),
        (["--option", "max_num_seqs=99999999999"], "max_num_seqs: must be <= 2,147,483,647"),
        (["--option", "seed=4294967296"], "seed: must be <= 4,294,967,295"),
        # Floats: finite, in range.
        (["--rate", "nan"], "--rate nan: expected a number > 0"),
        (["--rate", "1e9"], "--rate 1000000000.0: expected a number <= 1,000,000, or inf"),
        (["--device-cost-per-hour", "inf"], "--device-cost-per-hour inf: expected a number <="),
        (["--min-agreement", "nan"], "--min-agreement nan: expected a number <= 1"),
        (["--slo", "p99_ttft_ms=nan"], "SLO p99_ttft_ms=nan: a bound must be a finite number"),
        (
            ["--slo", "p99_ttft_ms=baseline*inf"],
            "--slo 'p99_ttft_ms=baseline*inf': expected baseline*FACTOR with a finite factor > 0",
        ),
        (["--option", "gpu_memory_utilization=.inf"], "must be in (0, 1] (got inf)"),
        (["--space", "{inf_space}"], "parameters[0].high: expected a finite number"),
        # Paths from the user, checked before anything is made.
        (["--root", "{tmp}/" + "r" * 256], "--root "),
        (["--root", "{tmp}/a\x01b"], "holds a control character ('\\x01')"),
        (["--root", "{tmp}/" + "/".join(["d" * 200] * 21)], "a path may be at most 4,095"),
        (["--root", "{spec}/studies"], "tune.yaml is a file"),
        (["--storage", "sqlite:///{tmp}/" + "s" * 256 + "/x.db"], "has a name of 256 bytes"),
        (["--model", "{tmp}/" + "m" * 256], "has a name of 256 bytes"),
        (["--study", "s" * 200], "--study "),
        (["--spec", "{tmp}/" + "n" * 256], "has a name of 256 bytes"),
        # Files from the user, read with a bound.
        (["--spec", "/dev/zero"], "spec /dev/zero: not a regular file"),
        (["--spec", "{fifo}"], "fifo: not a regular file"),
        (["--spec", "{big}"], "big.yaml: larger than 1 MiB, more than a spec can be"),
        (["--space", "/dev/zero"], "/dev/zero: not a file"),
        (["--space", "{big}"], "big.yaml: larger than 1 MiB"),
        (["--baseline", "/dev/zero"], "--baseline /dev/zero: not a regular file (a device"),
        (["--baseline", "{fifo}"], "fifo: not a regular file"),
        (["--workload", "jsonl:path=/dev/zero"], "dataset /dev/zero: not a regular file"),
        (["--workload", "jsonl:path={fifo}"], "fifo: not a regular file"),
        # Values that look alike, taken as one.
        (["--space", "{alike_space}"], '"true" and choices[0] true are one value to the engine'),
        # Issue 45, item 5: the offline scenario refuses a server command, never ignores it.
        (["--scenario", "offline"], "--engine-command (engine.command) starts a server"),
        # Issue 49: what passed the checks, created the study and failed at its first launch.
        # The engine command's words (braces doubled: the rows are formatted with the files);
        # each would start a server that never answers the tuner.
        (["--engine-command", "{{python}} x.py --port {{prot}}"], "(did you mean '{port}'?)"),
        (["--engine-command", "{{python}} x.py {{config}} {{config}}"], "{config} appears 2 times"),
        (["--engine-command", "{{python}} x.py --port {{port}}"], "names {port} but not {config}"),
        (["--engine-command", "vllm serve && echo up"], "'&&' is a shell operator"),
        (["--engine-command", "{{python}} x.py --model /m"], "gives --model itself"),
        # The program it starts, on this host.
        (["--engine-command", "nosuchprog --x"], "nosuchprog: no such program on PATH"),
        (["--engine-command", "{{python}} -m nosuchmodule.api"], "has no module named 'nosuch"),
        (["--engine-command", "{tmp}/nosuch.py"], "nosuch.py: no such file"),
        (["--engine-command", "{noexec}"], "noexec.sh: not executable"),
        (["--engine-command", "{{python}} {tmp}/nosuch.py"], "nosuch.py: no such script"),
        # Options the tuner sets for each trial; a study kept nowhere.
        (["--option", "port=8001"], "port is the tuner's to set for each trial"),
        (["--storage", "sqlite://"], "an in-memory database is gone when the command ends"),
        # Requests accepted with exit 0 while a flag contradicted another, or that no trial
        # could meet: one line, nothing made.
        (["--load", "capacity", "--slo", "p99_ttft_ms=9"], "--rate with --load capacity: a"),
        (["--confirm", "1", "--trials", "1"], "--confirm 1 with --trials 1: the confirm step"),
        (["--objective", "p99_ttft_ms:min", "--objective", "p99_ttft_ms:max"], "given twice"),
        (["--slo", "output_throughput=900"], "--slo output_throughput bounds it from above"),
        (["--slo", "error_rate=baseline*2"], "a baseline without failed requests measures 0"),
        (
            ["--workload", "random:input=32,output=1,prompts=8", "--slo", "p99_tpot_ms=50"],
            "--slo p99_tpot_ms: every request of the workload generates 1 token",
        ),
    ],
    ids=[
        "trials-huge",
        "option-two-flags",
        "option-help",
        "option-1k",
        "option-yes",
        "option-yaml",
        *("slo-inf", "spec-as-space", "space-as-spec"),
        "input-above-max-model-len",
        *("seed-negative", "option-unknown-to-vllm", "workload-a-path"),
        *("seed-2**32", "concurrency-huge", "repeats-huge", "confirm-huge", "rounds-huge"),
        *("parallel-huge", "prompts-huge", "output-huge", "workload-seed-huge"),
        *("workload-tokens-huge", "option-count-huge", "option-seed-huge"),
        *("rate-nan", "rate-huge", "cost-inf", "agreement-nan", "slo-nan", "slo-factor-inf"),
        *("option-fraction-inf", "space-bound-inf"),
        *("root-name-long", "root-control", "root-path-long", "root-under-a-file"),
        *("storage-name-long", "model-name-long", "study-long", "spec-name-long"),
        *("spec-device", "spec-fifo", "spec-huge", "space-device", "space-huge"),
        *("baseline-device", "baseline-fifo", "dataset-device", "dataset-fifo"),
        *("choices-alike", "offline-engine-command"),
        *("engine-placeholder-typo", "engine-placeholder-twice", "engine-placeholders-partial"),
        *("engine-shell-operator", "engine-launcher-flag", "engine-program-missing"),
        *("engine-module-missing", "engine-file-missing", "engine-not-executable"),
        *("engine-script-missing", "option-the-tuners", "storage-in-memory"),
        *("capacity-rate", "confirm-one-trial", "objective-twice", "slo-on-a-maximized"),
        *("relative-error-rate", "slo-between-no-tokens"),
    ],
)
def test_a_flag_that_failed_deep_inside_is_one_line(
    cli: Invoke, tune_argv: TuneArgv, tmp_path: Path, flags: list[str], names: str
) -> None:
    files = {"spec": tmp_path / "tune.yaml", "space": tmp_path / "space.yaml"}
    files["spec"].write_text("study: x\nmodel: m\n")
    files["space"].write_text("parameters:\n  - {name: max_num_seqs, type: int, low: 1, high: 8}\n")
    files |= hostile_files(tmp_path / "files")
    before = sorted(tmp_path.rglob("*"))
    line = one_error_line(cli(*tune_argv("hostile", *(f.format(**files) for f in flags))))
    assert names in line
    assert not (tmp_path / "studies").exists()
    assert sorted(tmp_path.rglob("*")) == before  # nothing made anywhere


def hostile_files(folder: Path) -> dict[str, Path]:
    """Files no reader should take whole or as sense: a FIFO (opened, it blocks), a sparse
    file past every bound (2 MiB, no disk), a space with an infinite bound and one with two
    choices that look alike."""
    folder.mkdir()
    os.mkfifo(folder / "fifo")
    with (folder / "big.yaml").open("wb") as big:
        big.truncate(2 * 1024 * 1024)
    (folder / "inf.yaml").write_text(
        "parameters:\n  - {name: x, env: VLLM_X, type: float, low: 0.5, high: .inf, baseline: 1}\n"
    )
    (folder / "alike.yaml").write_text(
        "parameters:\n  - {name: enforce_eager, type: categorical, choices: [true, 'true'],"
        " baseline: true}\n"
    )
    (folder / "noexec.sh").write_text('#!/bin/sh\nexec vllm serve "$@"\n')  # no +x
    return {
        "tmp": folder.parent,
        "fifo": folder / "fifo",
        "big": folder / "big.yaml",
        "inf_space": folder / "inf.yaml",
        "alike_space": folder / "alike.yaml",
        "noexec": folder / "noexec.sh",
    }


@pytest.mark.parametrize(
    ("more", "names"),
    [
        ("trials: 99999999999999999999999999\n", "trials"),
        ("trials: 2\nsampler: random\ntrials: 50\n", "duplicate key 'trials' (first on line 7)"),
        ("trials: yes\n", "trials"),
        ("engine:\n  options: {max_num_seqs: {a: 1}}\n", "max_num_seqs: a dict is not a whole"),
        ("objectives: []\n", "objectives"),
        ("engine:\n  options: {enable_prefix_caching: on}\n", "'on' is not true or false"),
        (
            "served_model_name: a\nengine:\n  options: {served_model_name: b}\n",
            "served_model_name 'a' and the engine option served_model_name='b' differ",
        ),
        # Issue 45: what a spec file gives is bounded as the flags are.
        ("seed: 4294967296\n", "seed: expected a number <= 4294967295"),
        ("engine: {startup_timeout_s: .inf}\n", "engine.startup_timeout_s: expected a number <="),
        ("engine: {hang_timeout_s: .nan}\n", "engine.hang_timeout_s: expected a number"),
        ("prune_margin: .inf\n", "prune_margin: expected a number <= 10"),
        ("max_error_rate: .nan\n", "max_error_rate: expected a number"),
        ("relative_slos: {p99_ttft_ms: .inf}\n", "p99_ttft_ms=baseline*inf: a factor must be"),
        ("slos: {p99_ttft_ms: 'baseline*.inf'}\n", "slos.p99_ttft_ms: expected baseline*FACTOR"),
        ("baseline: {max_num_seqs: .inf}\n", "baseline.max_num_seqs: inf is not a value of"),
        ("baseline: {max_num_seqs: 99999999999}\n", "which is a whole number from"),
        ('storage: "sqlite:///db\\0x"\n', "holds a control character ('\\x00')"),
        ('warm_start: "x"\nspec_space: 1\n', "spec_space: unknown field"),
        ("engine: {options: {max_model_len: 0}}\n", "max_model_len: must be >= 1 (got 0)"),
        # Issue 49: the offline batch program's words, and what an offline batch cannot measure.
        (
            "scenario: offline\nengine: {offline_command: '{python} b.py --config {config}'}\n",
            "engine.offline_command: names {config} but not {prompts} and {out}",
        ),
        ("scenario: offline\nslos: {p99_itl_ms: 50}\n", "an offline batch streams nothing"),
    ],
    ids=[
        *("trials-huge", "duplicate-key", "trials-yes", "option-mapping", "no-objectives"),
        *("option-on", "two-names"),
        *("seed-2**32", "startup-inf", "hang-nan", "margin-inf"),
        *("error-rate-nan", "factor-inf", "slo-factor-inf", "baseline-inf", "baseline-huge"),
        *("storage-nul", "unknown-field", "option-zero"),
        *("offline-placeholders-partial", "offline-itl"),
    ],
)
def test_a_spec_that_failed_deep_inside_is_one_line(
    cli: Invoke, tiny_model: Path, tmp_path: Path, more: str, names: str
) -> None:
    spec = tmp_path / "tune.yaml"
    spec.write_text(SPEC.format(model=tiny_model, root=tmp_path / "studies") + more)
    line = one_error_line(cli("tune", "--spec", spec))
    assert names in line
    assert not (tmp_path / "studies").exists()


def test_a_space_with_a_key_given_twice_is_refused(cli: Invoke, tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(
        "parameters:\n  - {name: max_num_seqs, type: int, low: 8, high: 128, low: 64,"
        " baseline: 64}\n"
    )
    line = one_error_line(cli("spaces", "validate", space))
    assert "duplicate key 'low'" in line


def test_the_load_client_asks_for_the_name_the_engine_serves_and_the_study_keeps_it(
    cli: Invoke, tune_argv: TuneArgv, tmp_path: Path
) -> None:
    # `--option served_model_name=X` makes the engine serve X; the client used to ask for the
    # model folder's name and every trial failed with HTTP 404 (the fake engine answers 404
    # for a name it does not serve, as vLLM does).
    result = cli(*tune_argv("named", "--trials", "1", "--option", "served_model_name=tiny-x"))
    assert result.exit_code == 0, result.output
    store = StudyStore(f"sqlite:///{tmp_path / 'studies' / 'named' / 'study.db'}")
    (trial,) = store.trials("named")
    assert trial.status == "ok", trial.reason
    assert trial.config["served-model-name"] == "tiny-x"
    # The same study with another workload: bad input, one line naming what differs.
    argv = tune_argv("named", "--trials", "2", "--option", "served_model_name=tiny-x")
    argv[argv.index("--workload") + 1] = "random:input=64,output=8,prompts=8,warmup=1"
    line = one_error_line(cli(*argv))
    assert "study 'named' was run with workload input=32, not input=64;" in line
    assert len(store.trials("named")) == 1


def test_the_lowest_free_slot_takes_no_memory_for_a_large_budget() -> None:
    assert lowest_free({}, MAX_TRIALS) == 1
    assert lowest_free({1: 0, 2: 1, 4: 3}, MAX_TRIALS) == 3
    assert lowest_free({1: 0, 2: 1}, 2) is None
    assert lowest_free({3: 0}, 10**30) == 1  # would be a list of 10**30 slots before


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--engine-command", ""], "--engine-command '': must not be empty"),
        (["--engine-command", "python 'x"], "cannot be split into words: no closing quotation"),
    ],
    ids=["empty", "unbalanced-quote"],
)
def test_an_engine_command_that_cannot_run_is_one_line(
    cli: Invoke, tune_argv: TuneArgv, tmp_path: Path, flags: list[str], names: str
) -> None:
    # An empty command silently meant the default (real vLLM) before.
    line = one_error_line(cli(*tune_argv("hostile", "--trials", "1", *flags)))
    assert names in line
    assert not (tmp_path / "studies").exists()


@pytest.mark.parametrize(
    "space",
    [
        "parameters:\n  - {name: x, type: int, low: 1, high: 8, baseline: 2, env: 'A=B'}\n",
        "env: {'A=B': '1'}\nparameters:\n  - {name: max_num_seqs, type: int, low: 1, high: 8,"
        " baseline: 2}\n",
    ],
    ids=["parameter", "fixed"],
)
def test_an_environment_variable_name_with_equals_is_refused(
    cli: Invoke, tmp_path: Path, space: str
) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(space)
    assert "'A=B' is not a variable name" in one_error_line(cli("spaces", "validate", path))


def test_a_read_only_sqlite_url_is_honoured_or_refused_never_ignored(
    cli: Invoke, tune_argv: TuneArgv, tuned: Tuned, tmp_path: Path
) -> None:
    # `?mode=ro` used to be ignored (the path became `study.db?mode=ro` and `tune` wrote).
    db = tmp_path / "study.db"
    shutil.copy(tuned.root / tuned.study / "study.db", db)
    before = db.read_bytes()
    url = f"sqlite:///{db}?mode=ro"
    shown = cli("show", tuned.study, "--storage", url)
    assert shown.exit_code == 0, shown.output
    assert "trial" in shown.output
    refused = one_error_line(cli(*tune_argv(tuned.study, "--storage", url)))
    assert "?mode=ro asks for a read-only database" in refused
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.db"]


def test_a_logged_warning_reads_as_the_clis_own_line() -> None:
    # `WARNING autotune.study._x: ...` with a time stamp used to sit among the CLI's lines.
    code = (
        "import logging; from autotune.cli._common import setup_logging; setup_logging(False); "
        "logging.getLogger('autotune.study.x').warning('kept %d trials', 3); "
        "logging.getLogger('autotune.study.x').info('not shown')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr == "warning: kept 3 trials\n"


def test_a_study_whose_database_was_lost_never_writes_over_its_trial_folders(
    cli: Invoke, tune_argv: TuneArgv, tmp_path: Path
) -> None:
    # The rerun used to start a new study at trial 0 and write into trial-0000, whose
    # requests.jsonl, engine.log and measurement.json were all that was left.
    assert cli(*tune_argv("lost", "--trials", "1")).exit_code == 0
    study_dir = tmp_path / "studies" / "lost"
    (study_dir / "study.db").unlink()
    kept = {p: p.read_bytes() for p in (study_dir / "trial-0000").rglob("*") if p.is_file()}
    assert (study_dir / "trial-0000" / "measurement.json") in kept
    line = one_error_line(cli(*tune_argv("lost", "--trials", "1")))
    assert "holds 1 trial folders (1 with a measurement) of a study that" in line
    assert "was its database lost?" in line
    assert "add --reingest to record their measurements in it first" in line
    assert {p: p.read_bytes() for p in kept} == kept


def test_a_lost_database_is_rebuilt_from_its_trial_folders_with_reingest(
    cli: Invoke, tune_argv: TuneArgv, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 32: a study whose folders hold measurements its database lacks offers to
    # re-ingest them; each is recorded as the trial of its number, told as it was (a bound
    # relative to the baseline fixed again from the baseline's runs).
    slo = ("--slo", "mean_ttft_ms=baseline*10")
    assert cli(*tune_argv("lost", "--trials", "3", *slo)).exit_code == 0
    study_dir = tmp_path / "studies" / "lost"
    url = f"sqlite:///{study_dir / 'study.db'}"
    before = {t.number: t for t in StudyStore(url).trials("lost")}
    bounds = StudyStore(url).study_facts("lost").slos
    assert [t.status for t in before.values()] == ["ok", "ok", "ok"]
    (study_dir / "trial-0001" / "measurement.json").unlink()  # died mid-benchmark
    (study_dir / "study.db").unlink()
    kept = {p: p.read_bytes() for p in study_dir.rglob("*") if p.is_file()}
    workload = "random:input=9,output=8,prompts=8,warmup=1"
    other = tune_argv("lost", "--trials", "4", *slo, "--reingest", "--workload", workload)
    line = one_error_line(cli(*other))  # measured with other settings: refused, nothing made
    assert line.endswith(
        "trial-0000 was measured with workload input=32, not input=9: give "
        "the settings it was run with"
    )
    assert not StudyStore(url).has("lost")
    done = cli(*tune_argv("lost", "--trials", "4", *slo, "--reingest"))
    assert done.exit_code == 0, done.output
    assert "re-ingested 2 measured trials from " in caplog.text
    assert StudyStore(url).study_facts("lost").slos == pytest.approx(bounds)
    after = {t.number: t for t in StudyStore(url).trials("lost")}
    for number in (0, 2):  # recorded from their folders, as they were
        assert after[number].status == "ok"
        assert after[number].params == before[number].params
        assert after[number].metrics == pytest.approx(before[number].metrics)
        assert after[number].values == pytest.approx(before[number].values)
        assert after[number].constraints == pytest.approx(before[number].constraints)
        assert after[number].role == before[number].role
    assert after[0].role == "baseline"
    assert after[1].status == "interrupted"
    assert "its folder has no complete measurement" in after[1].reason
    # The budget's other two slots: new trials, in new folders; its sampler went on.
    assert [(t.status, t.slot) for t in after.values() if t.slot] == [
        ("ok", 1),
        ("ok", 2),
        ("ok", 3),
        ("ok", 4),
    ]
    assert all(t.status != "duplicate" for t in after.values())
    assert all(p.read_bytes() == b for p, b in kept.items() if "trial-0001" not in str(p))


def test_confirm_refuses_a_study_that_is_still_being_tuned(cli: Invoke, tmp_path: Path) -> None:
    # `confirm` beside a running `tune` stored a winner for a study one trial old.
    url = f"sqlite:///{tmp_path / 'live.db'}"
    store = StudyStore(url)
    study, _ = store.create_or_load("live", ["maximize"], optuna.samplers.RandomSampler(0))
    trial = study.ask()  # running, its tuner beating
    with store.heartbeat(trial._trial_id):
        line = one_error_line(cli("confirm", "live", "--storage", url))
    assert "study 'live' is still being tuned (trial 0 is running)" in line
    assert "--while-running" in line


def test_a_full_disk_mid_study_is_one_line_and_keeps_every_measured_trial(
    cli: Invoke, tune_argv: TuneArgv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ENOSPC from writing a trial's requests.jsonl was a chained traceback of 140 lines.
    import autotune.measure._outcome as measure_module

    real, calls = measure_module.write_records, []

    def fills_the_disk(path: Path, records: object) -> None:
        calls.append(path)
        if len(calls) >= 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, records)  # type: ignore[arg-type]

    monkeypatch.setattr(measure_module, "write_records", fills_the_disk)
    line = one_error_line(cli(*tune_argv("full", "--trials", "3")), code=1)
    assert line.startswith("error: No space left on device: ")
    assert "trial-0001/requests.jsonl: the trial in progress is not recorded; every " in line
    store = StudyStore(f"sqlite:///{tmp_path / 'studies' / 'full' / 'study.db'}")
    assert [t.status for t in store.trials("full") if t.measured] == ["ok"]
    monkeypatch.setattr(measure_module, "write_records", real)  # room made: the study goes on
    again = cli(*tune_argv("full", "--trials", "3"))
    assert again.exit_code == 0, again.output
    assert len([t for t in store.trials("full") if t.measured]) == 3


def test_a_name_too_long_that_passed_the_edge_is_still_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The edge checks every path it is given; a name it did not see is bad input all the same.
    with pytest.raises(typer.Exit) as info, cli_errors():
        raise OSError(errno.ENAMETOOLONG, "File name too long", "n" * 300 + "[bold]")
    assert info.value.exit_code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: File name too long: 'nnn"), lines
    assert lines[0].endswith("nnn[bold]'")  # not read as markup
