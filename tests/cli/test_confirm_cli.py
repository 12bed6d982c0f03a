"""`--repeats`, `--prune` and the confirm step from the command line, on the fake engine."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.bench import pooled_summary, read_records
from autotune.measure import _turns
from autotune.store import StudyFacts, StudyStore
from autotune.vocab import layout

TuneArgv = Callable[..., list[str | Path]]
ONE_OBJECTIVE = ("--objective", "output_throughput:max")


def store_of(tmp_path: Path, study: str) -> StudyStore:
    return StudyStore(f"sqlite:///{tmp_path / 'studies' / study / 'study.db'}", create=False)


def test_confirm_twice_on_a_stable_engine_picks_the_same_winner(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object], monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_ENGINE_STEP_S", "0.01")  # simulated steps, not overhead, set time
    serve = tmp_path / "serve.sh"
    serve.write_text("vllm serve MODEL --max-num-seqs 4\n")  # a slow baseline, far from the rest
    argv = tune_argv(
        "c", "--trials", "3", "--seed", "1", *ONE_OBJECTIVE, "--baseline", serve,
        "--workload", "random:input=32,output=16,prompts=24,warmup=1", "--rate", "1000",
        "--confirm", "1", "--confirm-rounds", "3",
    )  # fmt: skip
    result = cli(*argv)
    out = result.output  # type: ignore[attr-defined]
    assert result.exit_code == 0, out  # type: ignore[attr-defined]
    assert "Confirm: 3 alternating rounds" in out and "confirmed winner (w): trial" in out
    # Printed once each, the front last: after the rounds, its confirmed winner marked.
    assert out.count("Pareto front of") == 1 and out.count("Confirm: 3 alternating") == 1
    assert out.index("  round 3: trial") < out.index("Pareto front of") < out.index("Confirm: 3")
    assert "w confirmed winner" in out
    first = store_of(tmp_path, "c").study_facts("c").confirm
    assert first["baseline"] == 0 and len(first["candidates"]) == 2
    assert first["winner"] not in (None, 0)
    best = first["order"][0][0]
    assert first["order"] == [[best, 0], [0, best], [best, 0]]
    assert f"trial {first['winner']}: gain +" in first["gain"]["verdict"]

    root = tmp_path / "studies"
    again = cli("confirm", "c", "--top", "1", "--rounds", "3", "--root", root)
    assert again.exit_code == 0, again.output  # type: ignore[attr-defined]
    second = store_of(tmp_path, "c").study_facts("c").confirm
    assert second["winner"] == first["winner"], (first["gain"], second["gain"])
    assert second["started"] >= first["started"]
    assert json.loads((root / "c" / "confirm.json").read_text())["winner"] == first["winner"]
    folders = sorted((root / "c" / "confirm").iterdir())
    assert len(folders) >= 1 and all((f / "round-1").is_dir() for f in folders)

    shown = cli("show", "c", "--root", root)
    assert f"{first['winner']} w" in shown.output  # type: ignore[attr-defined]
    exported = cli("export", "c", "--root", root, "-o", tmp_path / "best.yaml")
    assert exported.exit_code == 0, exported.output  # type: ignore[attr-defined]
    assert f"(trial {first['winner']}, confirmed winner" in exported.output  # type: ignore[attr-defined]
    header = (tmp_path / "best.yaml").read_text()
    assert (
        "# confirmed: output_throughput median" in header and "over 3 alternating rounds" in header
    )
    assert f"verdict: {second['gain']['verdict']}" in header


def test_a_confirm_round_measures_its_engines_in_turns(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object], monkeypatch
) -> None:
    """On a CPU host taken whole, with memory for both, a round starts the candidate's engine
    and the baseline's, then their batches alternate: read from the requests' own times, each
    batch ends before the other engine's next begins, and each engine's batches bracket the
    other's (both engines were up at once)."""
    monkeypatch.setenv("FAKE_ENGINE_STEP_S", "0.01")
    monkeypatch.setattr(_turns, "TURN_S", 0.0)  # one batch a turn: the order is known
    serve = tmp_path / "serve.sh"
    serve.write_text("vllm serve MODEL --max-num-seqs 4\n")
    argv = tune_argv(
        "t", "--trials", "2", "--seed", "1", *ONE_OBJECTIVE, "--baseline", serve,
        "--workload", "random:input=32,output=16,prompts=16,warmup=1", "--rate", "1000",
        "--repeats", "3", "--confirm", "1", "--confirm-rounds", "1",
    )  # fmt: skip
    result = cli(*argv)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    confirm = store_of(tmp_path, "t").study_facts("t").confirm or {}
    order = confirm["order"][0]
    assert confirm["turns"] == [{"round": 0, "batches": order * 3}], confirm["turns"]
    assert "Confirm: 1 alternating rounds (1 with engines in turns)" in result.output  # type: ignore[attr-defined]
    (stamp,) = (tmp_path / "studies" / "t" / layout.CONFIRM_DIR).iterdir()
    spans = []
    for number in order:
        folder = layout.confirm_run_dir(tmp_path / "studies" / "t", stamp.name, 0, number)
        batches = sorted((folder / layout.RUNS_DIR).glob("run-*.jsonl"))
        assert len(batches) == 3
        for path in batches:
            records = read_records(path)
            spans.append((min(r.send_time for r in records), max(r.end_time for r in records),
                          number))  # fmt: skip
    spans.sort()
    assert [n for _, _, n in spans] == order * 3
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


def test_repeats_keep_a_spread_that_show_prints(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object]
) -> None:
    result = cli(*tune_argv("r", "--trials", "2", "--repeats", "2"))
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    base, trial = store_of(tmp_path, "r").trials("r")
    assert trial.engine.repeats == 2 and "output_throughput" in trial.spread
    assert len(list(Path(trial.trial_dir or "").glob("runs/run-*.jsonl"))) == 2
    assert base.role == "baseline" and base.engine.repeats == 2  # no relative SLO: as any
    shown = cli("show", "r", "--root", tmp_path / "studies")
    assert " ±" in shown.output  # type: ignore[attr-defined]


def test_pruned_trials_are_reported_with_the_time_they_saved(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object], monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_ENGINE_STEP_S", "0.01")
    argv = tune_argv(
        "p", "--trials", "5", "--seed", "3", "--prune", "--slo", "p99_ttft_ms=1",
        "--workload", "random:input=32,output=16,prompts=24,warmup=1",
    )  # fmt: skip
    result = cli(*argv)
    out = result.output  # type: ignore[attr-defined]
    assert result.exit_code == 3, out  # no config meets 1 ms: the study answers with the closest
    assert "Closest: trial" in out
    trials = store_of(tmp_path, "p").trials("p")
    pruned = [t for t in trials if t.status == "pruned"]
    # A 1 ms TTFT bound breaks at once: every trial but the baseline stops early.
    assert len(pruned) == 4 and trials[0].status == "ok"
    assert all("p99_ttft_ms SLO already broken" in t.reason for t in pruned)
    assert all(t.metrics["completed"] < 24 for t in pruned)
    assert "4 pruned early, about" in out and "device-seconds saved" in out


def test_a_study_without_a_stored_spec_cannot_be_confirmed(
    tmp_path: Path, cli: Callable[..., object]
) -> None:
    result = cli("confirm", "nope", "--root", tmp_path)
    assert result.exit_code != 0
    (line,) = result.output.strip().splitlines()  # type: ignore[attr-defined]
    assert line.startswith("error:")


def test_a_relative_bound_rests_on_the_baselines_three_runs(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object]
) -> None:
    """A p99 over a small workload is about its largest sample: the bound relative to the
    baseline rests on three runs of it on its one engine (their requests pooled), not one."""
    argv = tune_argv("m", "--trials", "1", "--slo", "p99_ttft_ms=baseline*1.2")
    result = cli(*argv)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    store = store_of(tmp_path, "m")
    (base,) = store.trials("m")
    runs = sorted(Path(base.trial_dir or "").glob("runs/run-*.jsonl"))
    assert base.engine.repeats == 3 and len(runs) == 3
    pooled = pooled_summary([read_records(run) for run in runs]).ttft_ms.p99
    facts = store.study_facts("m")
    basis = facts.slo_basis["p99_ttft_ms"]
    assert basis.baseline == pytest.approx(pooled)
    assert facts.slos["p99_ttft_ms"] == pytest.approx(1.2 * basis.baseline)


def test_a_confirm_step_stopped_mid_way_shows_no_stale_verdict(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object], monkeypatch
) -> None:
    # Issue 45: after a kill during the confirm step, the rerun printed "no winner: no
    # candidate held the SLOs" (the step's first run, judged as if it were all) on a study
    # that has no SLOs.
    from autotune.study import Confirmer

    made = Confirmer.of

    def stopped_in_its_second_run(harness: object, store: StudyStore, on_run: object) -> Confirmer:
        confirmer = made(harness, store, on_run)  # type: ignore[arg-type]
        runs: list[object] = []

        def stop(*args: object) -> None:  # as Ctrl-C would, once the first run is kept
            runs.append(args)
            if len(runs) == 2:
                raise KeyboardInterrupt

        confirmer.on_run = stop
        return confirmer

    monkeypatch.setattr(Confirmer, "of", stopped_in_its_second_run)
    argv = tune_argv("k", "--trials", "2", *ONE_OBJECTIVE, "--confirm", "1")
    tuned = cli(*argv)
    assert tuned.exit_code == 130, tuned.output  # type: ignore[attr-defined]
    shown = cli("show", "k", "--root", tmp_path / "studies").output  # type: ignore[attr-defined]
    assert "no candidate held the SLOs" not in shown
    assert "no verdict: 1 run measured so far, of at most 6 rounds (it is still running" in shown


def test_a_confirm_step_with_nothing_to_re_measure_is_its_verdict_alone() -> None:
    """No config but the baseline met the SLOs: the step ran no round, and prints no table of
    none ("Confirm: 0 alternating rounds" and its empty columns)."""
    from rich.console import Console

    from autotune.cli._render import print_confirm

    verdict = "no config measured better than your defaults: the winner is the baseline"
    result = {
        "metric": "output_throughput", "direction": "maximize", "rounds": 0, "order": [],
        "baseline": 0, "candidates": {}, "winner": 0, "gain": {"verdict": verdict},
    }  # fmt: skip
    console = Console(record=True, width=200)
    print_confirm(console, StudyFacts(confirm=result))
    lines = console.export_text().splitlines()
    assert lines == [
        f"confirmed winner (w): trial 0 (the baseline: your defaults); verdict: {verdict}"
    ]
