"""`autotune predict` and `show` over a study whose trials were predicted before they ran (an
engine whose step time is a known model: tests/study/fakes.py's ModelEngine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from study.fakes import MODEL_ENGINE_LOAD, MakeSpec, ModelEngine, run

from autotune.space import SearchSpace
from autotune.store import TrialRecord
from cli.conftest import Invoke


@pytest.fixture
def study(make_spec: MakeSpec, space: SearchSpace) -> tuple[Path, list[TrialRecord]]:
    spec = make_spec(trials=6, search="goal", sampler="random", seed=1, load=MODEL_ENGINE_LOAD)
    _, trials = run(spec, space, ModelEngine({}))  # type: ignore[arg-type]
    return spec.root, trials


def test_predict_answers_a_what_if_with_an_interval(
    study: tuple[Path, list[TrialRecord]], cli: Invoke
) -> None:
    root, _ = study
    out = cli("predict", "s", "--root", root, "--set", "max_num_seqs=8", "--set",
              "kv_cache_mib=256", "--format", "json")  # fmt: skip
    assert out.exit_code == 0, out.output  # type: ignore[attr-defined]
    data = json.loads(out.output)  # type: ignore[attr-defined]
    assert data["config"]["max_num_seqs"] == 8
    assert data["config"]["kv_cache_memory_bytes"] == 256 * 2**20  # through the space's scale
    low, mid, high = data["prediction"]["metrics"]["p50_ttft_ms"]
    assert low < mid < high and data["prediction"]["trials"] == 6
    wide = cli("predict", "s", "--root", root, "--set", "max_num_seqs=128")
    assert wide.exit_code == 0, wide.output  # type: ignore[attr-defined]
    text = wide.output  # type: ignore[attr-defined]
    assert "predicted by the engine model of 6 measured trials" in text
    assert "output_throughput" in text and "error so far" in text
    # Fewer slots than the 48 clients: the queue makes the first token later.
    assert (
        mid
        > json.loads(
            cli("predict", "s", "--root", root, "--format", "json").output  # type: ignore[attr-defined]
        )["prediction"]["metrics"]["p50_ttft_ms"][1]
    )
    unread = cli("predict", "s", "--root", root, "--set", "enable_prefix_caching=false")
    assert "the model does not read enable_prefix_caching" in unread.output  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--set", "bogus=1"], "--set bogus: not a parameter of the study's space"),
        (["--set", "max_num_seqs"], "expected NAME=VALUE"),
        # Issue 45: the value is wrong, not the space file (which was named), and its range
        # is said.
        (
            ["--set", "max_num_seqs=100000"],
            "--set max_num_seqs=100000: 100000 is not a value of max_num_seqs, which is a whole "
            "number from ",
        ),
        (["--set", "max_num_seqs=.inf"], "inf is not a value of max_num_seqs, which is a whole"),
        (["--set", "max_num_seqs=["], "--set 'max_num_seqs=[': '[' is not a YAML value"),
    ],
)
def test_predict_bad_input_is_one_line(
    study: tuple[Path, list[TrialRecord]], cli: Invoke, args: list[str], message: str
) -> None:
    root, _ = study
    out = cli("predict", "s", "--root", root, *args)
    assert out.exit_code != 0
    assert message in out.output  # type: ignore[attr-defined]
    assert len(out.output.strip().splitlines()) == 1  # type: ignore[attr-defined]
    assert ".yaml" not in out.output  # type: ignore[attr-defined]


def test_show_puts_the_prediction_beside_the_measurement(
    study: tuple[Path, list[TrialRecord]], cli: Invoke
) -> None:
    root, trials = study
    out = cli("show", "s", "--all", "--root", root)
    text = out.output  # type: ignore[attr-defined]
    assert "predicted" in text
    assert "engine model, predicted before each of 5 trials ran: median error tok/s" in text
    later = trials[1]
    assert f"~{later.prediction['metrics']['output_throughput'][1]:,.0f}" in text


def test_the_dashboards_trial_page_puts_the_prediction_beside_the_measurement(
    study: tuple[Path, list[TrialRecord]],
) -> None:
    from autotune.dashboard._catalog import Catalog
    from autotune.dashboard._html import Frame
    from autotune.dashboard._trial import trial_view
    from autotune.dashboard._trial_page import trial_main

    root, trials = study
    later = trials[2]
    page = trial_main(trial_view(Catalog(root, None, "s"), "s", later.number), Frame())
    assert "<h2>Engine model</h2>" in page and "predicted before it ran" in page
    low, mid, high = later.prediction["metrics"]["output_throughput"]
    assert all(f"{x:,.2f}" in page for x in (low, mid, high, later.metric("output_throughput")))
    baseline = trial_main(trial_view(Catalog(root, None, "s"), "s", 0), Frame())
    assert "Engine model" not in baseline  # nothing to predict it from
