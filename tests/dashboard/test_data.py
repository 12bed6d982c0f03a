"""The dashboard's view models over studies the fake engine produced through the CLI."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import optuna
import plotly.graph_objects as go
import pytest

from autotune.answer.export import choose_export
from autotune.dashboard import Catalog, UnknownStudy, study_rows, study_state, study_view
from autotune.dashboard._charts import BASELINE, WINNER
from autotune.dashboard._data import default_params, finite, y_options
from autotune.store import StudyStore

from .conftest import Studies


def check_figure(fig: dict) -> None:
    go.Figure(fig)  # plotly validates every property name and value


def test_studies_list_counts_outcomes(studies: Studies) -> None:
    rows = {r.name: r for r in study_rows(Catalog(studies.root))}
    assert sorted(rows) == ["s1", "s2", "s3"]
    ok, oom, pruned = rows["s1"], rows["s2"], rows["s3"]
    assert (ok.trials, ok.done, ok.failed, ok.pruned, ok.running) == (5, 5, 0, 0, 0)
    assert ok.objective == "output_throughput" and ok.direction == "maximize"
    store = StudyStore(f"sqlite:///{studies.root / 's1' / 'study.db'}", create=False)
    # The trial `export` writes (here the confirm step's winner): one answer in every view.
    best = choose_export(store.trials("s1"), store.study_facts("s1"))[0]
    assert ok.best == best.metric("output_throughput") and ok.best_trial == best.number
    assert "cores" in ok.hardware and ok.scenario == "online" and ok.created
    assert ok.model.endswith("tiny")
    assert (oom.done, oom.failed, oom.best) == (0, 1, None)
    assert pruned.pruned >= 1 and pruned.best is None  # its SLO cannot be met


def test_study_view_of_a_confirmed_study(studies: Studies) -> None:
    view = study_view(Catalog(studies.root), "s1")
    store = StudyStore(f"sqlite:///{studies.root / 's1' / 'study.db'}", create=False)
    facts = store.study_facts("s1")
    assert [o.metric for o in view.y_options] == ["p99_ttft_ms", "p99_tpot_ms"]
    assert view.param_pair == ["max_num_seqs", "kv_cache_mib"]
    assert view.baseline == 0 and view.front
    # The marked winner is what `export` writes by default: the confirmed winner.
    chosen, how = choose_export(store.trials("s1"), facts)
    assert view.winner is not None and view.winner.number == chosen.number
    assert view.winner.number == facts.confirmed_winner and view.winner.how == how
    assert view.winner.yaml.startswith(f"# vllm-autotune: study 's1', trial {chosen.number}")
    assert view.confirm is not None and view.confirm.finished
    assert view.confirm.winner == chosen.number and view.confirm.verdict
    assert {c["number"] for c in view.confirm.candidates} >= {0}
    assert set(view.importance) == {
        "max_num_seqs", "max_num_batched_tokens", "kv_cache_mib", "enable_prefix_caching",
    }  # fmt: skip
    assert math.isclose(sum(view.importance.values()), 1.0, rel_tol=1e-6)
    assert [t.outcome for t in view.trials] == ["ok"] * 5
    assert view.trials[0].role == "baseline"


def test_pareto_figures_mark_winner_baseline_and_slos(studies: Studies) -> None:
    view = study_view(Catalog(studies.root), "s1")
    figures = view.jsonable()["figures"]
    assert set(figures["pareto"]) == {"p99_ttft_ms", "p99_tpot_ms"}
    for metric, fig in figures["pareto"].items():
        check_figure(fig)
        names = [trace["name"] for trace in fig["data"]]
        assert f"{WINNER} (trial {view.winner.number})" in names  # type: ignore[union-attr]
        assert f"{BASELINE} (trial 0)" in names
        assert "feasible" in names
        shapes = fig["layout"]["shapes"]
        assert [s["name"] for s in shapes] == [f"SLO {metric}"]
        bound = {"p99_ttft_ms": 1000.0, "p99_tpot_ms": 100.0}[metric]
        assert shapes[0]["y0"] == shapes[0]["y1"] == bound  # horizontal: y is the SLO'd metric
        assert fig["layout"]["yaxis"]["type"] == "log"  # the bound is >10x the points: log axis
        assert "type" not in fig["layout"]["xaxis"]
        points = [n for trace in fig["data"][:2] for n in trace["customdata"]]
        assert sorted(points) == [0, 1, 2, 3, 4]  # every measured trial, once
    for key in ("history", "params", "importance"):
        check_figure(figures[key])
    history = figures["history"]["data"][-1]
    assert history["name"] == "best feasible so far" and history["x"][0] == 0
    assert history["y"] == sorted(history["y"])  # a maximized objective only goes up


def test_failed_and_pruned_studies(studies: Studies) -> None:
    catalog = Catalog(studies.root)
    oom = study_view(catalog, "s2")
    assert oom.winner is None and "no trial of this study was measured" in oom.winner_note
    (trial,) = oom.trials
    assert (trial.outcome, trial.kind) == ("failed", "oom")
    assert "out of memory" in trial.reason.lower()
    assert oom.importance == {} and "at least 4" in oom.importance_note
    assert oom.figures["pareto"]["p99_ttft_ms"]["data"] == []  # an empty chart with a note
    for fig in (*oom.figures["pareto"].values(), oom.figures["params"], oom.figures["importance"]):
        check_figure(fig)
    groups = {trace["name"] for trace in oom.figures["params"]["data"]}
    assert groups == {"oom"}

    pruned = study_view(catalog, "s3")
    assert "pruned" in [t.outcome for t in pruned.trials]
    groups = {trace["name"] for trace in pruned.figures["params"]["data"]}
    assert {"ok, misses SLO", "pruned"} <= groups
    fig = pruned.figures["pareto"]["p99_ttft_ms"]
    assert [t["name"] for t in fig["data"][:2]] == ["feasible", "infeasible (misses a constraint)"]
    assert fig["data"][0]["x"] == [] and fig["data"][1]["customdata"] == [0]  # pruned: not measured


def test_state_signature_moves_when_a_trial_appears(studies: Studies, tmp_path: Path) -> None:
    shutil.copytree(studies.root / "s1", tmp_path / "s1")
    catalog = Catalog(tmp_path)
    before = study_state(catalog, "s1")
    assert before.trials == 5 and before.running == 0
    assert study_state(catalog, "s1").signature == before.signature  # stable while idle
    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{tmp_path / 's1' / 'study.db'}")
    trial = study.ask()  # another worker starts a trial
    running = study_state(catalog, "s1")
    assert running.trials == 6 and running.running == 1
    assert running.signature != before.signature
    assert study_view(catalog, "s1").trials[-1].outcome == "running"
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert study_state(catalog, "s1").signature not in (before.signature, running.signature)


def test_unknown_study_lists_the_known_ones(studies: Studies) -> None:
    with pytest.raises(UnknownStudy, match=r"no study named 'nope' \(known: s1, s2, s3\)"):
        study_view(Catalog(studies.root), "nope")
    with pytest.raises(UnknownStudy, match="known: s1, s2, s3"):
        Catalog(studies.root, study="nope").check("nope")


def test_defaults_and_json_safety() -> None:
    assert default_params(["enable_prefix_caching", "kv_cache_mib", "max_num_seqs"]) == [
        "max_num_seqs",
        "kv_cache_mib",
    ]
    cuda = ["block_size", "gpu_memory_utilization", "kv_cache_dtype", "max_num_seqs"]
    assert default_params(cuda) == ["max_num_seqs", "gpu_memory_utilization"]
    assert default_params(["a", "b"]) == ["a", "b"] and default_params(["a"]) == []
    capacity = [("capacity_rps", "maximize"), ("p99_ttft_ms", "minimize")]
    assert [o.metric for o in y_options(capacity)] == ["p99_ttft_ms", "p99_tpot_ms"]
    offline = [("output_throughput", "maximize"), ("peak_memory_gib", "minimize")]
    assert [o.metric for o in y_options(offline)] == [
        "peak_memory_gib",
        "p99_ttft_ms",
        "p99_tpot_ms",
    ]
    # An SLO on a metric no objective names is a choice too: its line is drawn on it.
    latencies = [("output_throughput", "maximize"), ("p99_ttft_ms", "minimize")]
    assert [o.metric for o in y_options(latencies, ["p90_ttft_ms", "p99_ttft_ms"])] == [
        "p99_ttft_ms",
        "p90_ttft_ms",
        "p99_tpot_ms",
    ]
    assert finite({"a": [math.inf, 1.0, -math.inf], "b": math.nan}) == {
        "a": [None, 1.0, None],
        "b": None,
    }
