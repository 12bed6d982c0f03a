"""benchmarks/search_efficiency.py: its pure helpers, its measurement table, and one run end to
end against the fake engine."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from support import FAKE_COMMAND

from autotune.bench import Stats, Summary
from autotune.engine import EngineConfig
from autotune.measure import Measurement
from autotune.space import load_space
from autotune.store import TrialFacts

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "search_efficiency.py"
sys.path.insert(0, str(SCRIPT.parent))  # the script imports its measurement_table beside it


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("search_efficiency", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


se = _load(SCRIPT)


def steps(*pairs: tuple[float, float | None]) -> list:
    return [se.Step(device_s, score) for device_s, score in pairs]


def summary(goodput: float, p99_ttft_ms: float = 10.0) -> Summary:
    stats = Stats(mean=p99_ttft_ms / 2, p50=p99_ttft_ms / 2, p90=p99_ttft_ms, p99=p99_ttft_ms)
    return Summary(
        completed=10, errors=0, duration_s=1.0, output_throughput=100.0, total_throughput=200.0,
        request_throughput=goodput, goodput=goodput,
        ttft_ms=stats, tpot_ms=stats, itl_ms=stats, e2e_ms=stats,
    )  # fmt: skip


# --- reaching a threshold -------------------------------------------------------------------


def test_reach_counts_trials_and_device_seconds_up_to_the_first_hit() -> None:
    path = steps((10.0, None), (5.0, 1.0), (7.0, 3.0), (1.0, 2.0))
    assert se.reach(path, 2.5) == (3, 22.0)
    assert se.reach(path, 3.0) == (3, 22.0)  # reaching the threshold exactly counts
    assert se.reach(path, 1.0) == (2, 15.0)


def test_reach_is_none_when_no_trial_gets_there() -> None:
    assert se.reach(steps((10.0, 1.0), (5.0, None)), 1.5) is None
    assert se.reach(steps((30.0, None)), 0.0) is None  # a failed trial never reaches
    assert se.reach([], 0.0) is None


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([3.0, 1.0, 2.0], 2.0),
        ([1.0, 3.0], 2.0),
        ([1.0, None, 2.0], 2.0),  # one seed of three never: the median still reached
        ([1.0, None], None),  # half never: (1 + never) / 2 is never
        ([1.0, None, None], None),
        ([None], None),
        ([], None),
    ],
)
def test_median_counts_not_reached_as_never(values: list, expected: float | None) -> None:
    assert se.median_reached(values) == expected


def test_method_row_takes_medians_over_seeds() -> None:
    seeds = [
        steps((10.0, 5.0), (10.0, 9.8), (10.0, 10.0)),
        steps((20.0, 9.6), (20.0, 9.0)),
        steps((5.0, None), (5.0, 8.0), (5.0, 9.0)),
    ]
    row = se.method_row("tpe", seeds, best=10.0)
    assert (row["seeds"], row["trials"], row["best_found"]) == (3, 3, 9.6)
    assert row["95%"] == {
        "trials": 2,  # seeds: 2, 1, never
        "device_s": 20.0,
        "seeds_reached": 2,
        "per_seed": [[2, 20.0], [1, 20.0], None],
    }
    assert row["98%"]["trials"] is None  # only the first seed got to 9.8
    assert row["98%"]["seeds_reached"] == 1


def test_table_says_not_reached_and_how_many_seeds_did() -> None:
    seeds = [steps((10.0, 10.0)), steps((10.0, 5.0), (10.0, 6.0)), steps((10.0, 9.7))]
    grid = [steps((1.0, 5.0), (1.0, 6.0))]
    text = se.render_table(
        [se.method_row("tpe", seeds, 10.0), se.method_row("grid", grid, 10.0)], "goodput"
    )
    header, _, tpe, grid_row = text.splitlines()
    assert header.startswith("| method | seeds | best goodput found (median) | trials to 95%")
    assert tpe.split(" | ")[3:5] == ["1 (2/3 seeds)", "10.0 (2/3 seeds)"]
    assert tpe.split(" | ")[5:7] == [
        "not reached in 2 trials (1/3 seeds)",
        "not reached (1/3 seeds)",
    ]
    assert "not reached in 2 trials | not reached |" in grid_row  # one seed: no seed count


def test_trial_score_is_the_metric_of_a_feasible_measured_trial() -> None:
    ok = Measurement(status="ok", summary=summary(goodput=7.0, p99_ttft_ms=100.0), device_s=3.0)
    slos = {"p99_ttft_ms": 200.0}
    assert se.trial_score(ok, "goodput", slos, 0.0) == 7.0
    assert se.trial_score(ok, "goodput", {"p99_ttft_ms": 50.0}, 0.0) is None  # SLO broken
    assert se.trial_score(Measurement(status="oom", device_s=9.0), "goodput", slos, 0.0) is None


# --- the grid -------------------------------------------------------------------------------


def test_grid_of_the_shipped_space_loops_as_auto_tune_sh() -> None:
    points = se.grid_points(load_space(se.SPACE_FILE))
    pairs = [(p["max_num_seqs"], p["max_num_batched_tokens"]) for p in points]
    assert pairs == [(s, t) for s in (8, 48, 88, 128) for t in (512, 1280, 2048)]


def test_grid_puts_seqs_outside_tokens_and_the_other_parameters_inside(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(
        "name: g\nparameters:\n"
        "  - {name: prefix, type: bool, option: enable_prefix_caching, baseline: true}\n"
        "  - {name: max_num_batched_tokens, type: int, low: 512, high: 1024, step: 512, "
        "baseline: 512}\n"
        "  - {name: seqs, option: max_num_seqs, type: categorical, choices: [64, 8], "
        "baseline: 64}\n"
    )
    points = se.grid_points(load_space(path))
    assert [list(p) for p in points[:1]] == [["seqs", "max_num_batched_tokens", "prefix"]]
    assert [tuple(p.values()) for p in points[:3]] == [
        (64, 512, False),
        (64, 512, True),
        (64, 1024, False),
    ]


def test_grid_refuses_a_space_it_cannot_enumerate(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(
        "name: g\nparameters:\n"
        "  - {name: gpu_memory_utilization, type: float, low: 0.5, high: 0.9, baseline: 0.9}\n"
    )
    with pytest.raises(ValueError, match="no grid"):
        se.grid_points(load_space(path))
    path.write_text(
        "name: g\nparameters:\n"
        "  - {name: max_num_seqs, type: int, low: 1, high: 16, baseline: 1}\n"
        "  - {name: max_num_batched_tokens, type: int, low: 2048, high: 2063, baseline: 2048}\n"
    )
    with pytest.raises(ValueError, match="256 points"):
        se.grid_points(load_space(path), limit=100)


# --- the measurement table ------------------------------------------------------------------


class CountingMeasure:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, config: EngineConfig, trial_dir: Path, judge: object = None) -> Measurement:
        self.calls += 1
        goodput = float(config.args["max_num_seqs"])
        return Measurement(
            status="ok", summary=summary(goodput), engine=TrialFacts(startup_s=1.0), device_s=4.5
        )


def test_table_measures_each_config_once_and_keeps_it(tmp_path: Path) -> None:
    path, header = tmp_path / "table.json", {"model": "m", "slos": {}}
    counting = CountingMeasure()
    table = se.MeasurementTable(path, header, counting, str)
    config = EngineConfig(model="m", args={"max_num_seqs": 8})
    first = table.measurement(config, {"seqs": 8})
    again = table.measurement(EngineConfig(model="other", args={"max_num_seqs": 8}), {"seqs": 8})
    assert counting.calls == 1 and table.measured_now == 1
    assert first.summary == again.summary and again.device_s == 4.5

    reread = se.MeasurementTable(path, header, counting, str)
    m = reread.measurement(config, {"seqs": 8})
    assert counting.calls == 1 and reread.measured_now == 0
    assert m.summary is not None and m.summary.goodput == 8.0
    assert reread.entries[se.config_key(config)]["params"] == {"seqs": 8}

    with pytest.raises(SystemExit, match="other settings"):
        se.MeasurementTable(path, {**header, "slos": {"p99_ttft_ms": 1.0}}, counting, str)


# --- end to end against the fake engine -----------------------------------------------------


def test_the_script_against_the_fake_engine(
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FAKE_ENGINE_STARTUP_S", "0.1")
    monkeypatch.delenv("FAKE_ENGINE_FAIL", raising=False)
    argv = [
        "--model", str(tiny_model), "--engine-command", FAKE_COMMAND,
        "--workload", "random:input=16,output=4,prompts=8,warmup=1", "--concurrency", "8",
        "--slo", "p99_ttft_ms=60000", "--trials", "3", "--seeds", "2", "--root", str(tmp_path),
    ]  # fmt: skip
    se.main(argv)
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "results.json").read_text())
    table = json.loads((tmp_path / "measurements.json").read_text())
    markdown = (tmp_path / "results.md").read_text()

    assert [(r["method"], r["seeds"], r["trials"]) for r in results["methods"]] == [
        ("tpe", 2, 3), ("random", 2, 3), ("grid", 1, 12),
    ]  # fmt: skip
    assert len(table["measurements"]) == 12  # the grid measured every point, once
    runs = results["runs"]
    assert [(r["method"], r["seed"]) for r in runs] == [
        ("tpe", 0), ("tpe", 1), ("random", 0), ("random", 1), ("grid", 0),
    ]  # fmt: skip
    for run in runs[:4]:  # the tuner's trial 0 is the space's baseline
        assert run["trials"][0]["params"] == {"max_num_seqs": 128, "max_num_batched_tokens": 2048}
    scores = [t["score"] for r in runs for t in r["trials"]]
    assert results["reference"]["best"] == max(scores)
    assert all(t["device_s"] > 0 and t["status"] == "ok" for r in runs for t in r["trials"])
    grid = results["methods"][2]
    assert grid["95%"]["trials"] == grid["95%"]["per_seed"][0][0]
    assert "| method | seeds | best goodput found (median) |" in markdown
    assert markdown.splitlines()[0] in out and "| grid | 1 |" in out
    assert "measured in this run" in out and "each config was measured once" in markdown

    se.main(argv)  # the table is reused: nothing is measured again, the report is the same
    again = capsys.readouterr().out
    assert "measuring" not in again and "0 measured in this run" in again
    assert json.loads((tmp_path / "results.json").read_text())["methods"] == results["methods"]
