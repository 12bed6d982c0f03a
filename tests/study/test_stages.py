"""A mixture-of-experts study decides its layout first, then searches the scheduler within the
winning layout; each trial records its stage. A dense model's study has one stage."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from autotune import store as keys
from autotune.bench import Summary
from autotune.devices import DevicePool
from autotune.engine import EngineConfig, devices_of
from autotune.measure import Measurement
from autotune.search import StagedSampler, layout_winner
from autotune.space import load_space
from autotune.spec import TuneSpec
from autotune.store import StudyStore, TrialFacts, TrialRecord
from autotune.study import Harness, Machine, StudyRunner, TrialStarted

SPACE = """
name: moe
platform: cuda
parameters:
  - {name: tensor_parallel_size, type: categorical, choices: [1, 2], baseline: 1}
  - {name: data_parallel_size, type: categorical, choices: [1, 2], baseline: 1}
  - {name: enable_expert_parallel, type: bool, baseline: false}
  - {name: max_num_seqs, type: categorical, choices: [16, 32, 64, 128], baseline: 32}
"""
LAYOUT = ["tensor_parallel_size", "data_parallel_size", "enable_expert_parallel"]


def moe_model(tiny_model: Path, folder: Path) -> Path:
    """The tiny model's files with a config.json that says it has 8 experts (the measure
    here is a stand-in: no engine reads the weights)."""
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(num_experts=8, moe_intermediate_size=128)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


class LayoutHost:
    """Throughput by layout: DP2 with EP the fastest, then by max_num_seqs."""

    def __init__(self, summary_of: Callable[..., Summary]) -> None:
        self.summary_of = summary_of
        self.calls: list[EngineConfig] = []

    def __call__(self, config: EngineConfig, trial_dir: Path) -> Measurement:
        self.calls.append(config)
        args = config.args
        speed = {(1, 1): 100.0, (2, 1): 150.0, (1, 2): 160.0}[
            (args.get("tensor_parallel_size", 1), args.get("data_parallel_size", 1))
        ]
        if args.get("enable_expert_parallel"):
            speed *= 1.5
        speed += int(args.get("max_num_seqs", 32))
        summary = self.summary_of(throughput=speed, ttft_p99=50.0, tpot_p99=5.0)
        return Measurement("ok", summary=summary, engine=TrialFacts(startup_s=1.0), device_s=1.0)


def run_study(
    make_spec: Callable[..., TuneSpec],
    tmp_path: Path,
    host: LayoutHost,
    model: Path,
    layout: list[str],
) -> tuple[list[TrialRecord], list[Any]]:
    (tmp_path / "moe.yaml").write_text(SPACE)
    space = load_space(tmp_path / "moe.yaml")
    spec = make_spec(
        model=str(model), space=str(tmp_path / "moe.yaml"), trials=8, search="goal", seed=1
    )
    pool = DevicePool([0, 1], platform="cuda")
    events: list[Any] = []
    harness = Harness(spec, space, host, machine=Machine(pool=pool), layout=layout)
    StudyRunner(harness, StudyStore(spec.storage_url), events.append).run()
    return StudyStore(spec.storage_url).trials(spec.study), events


def test_the_layout_stage_runs_first_then_the_scheduler_within_the_winner(
    make_spec: Callable[..., TuneSpec],
    summary_of: Callable[..., Summary],
    tiny_model: Path,
    tmp_path: Path,
) -> None:
    host = LayoutHost(summary_of)
    model = moe_model(tiny_model, tmp_path / "moe-model")
    trials, events = run_study(make_spec, tmp_path, host, model, LAYOUT)
    launched = [t for t in trials if t.device_s is not None]
    stages = [t.stage for t in launched]
    # The baseline and the plan's four layouts on two GPUs (TP2, DP2, each with and without
    # EP), at the baseline's max_num_seqs; then the scheduler stage.
    assert stages[:5] == ["layout"] * 5 and set(stages[5:]) == {"scheduler"}, stages
    first = launched[:5]
    assert all(t.params["max_num_seqs"] == 32 for t in first)
    assert {(t.params["tensor_parallel_size"], t.params["data_parallel_size"],
             t.params["enable_expert_parallel"]) for t in first[1:]} == {
        (2, 1, False), (1, 2, False), (2, 1, True), (1, 2, True)
    }  # fmt: skip
    # Within the winner: DP2 with EP (the fastest layout), whatever max_num_seqs it tries.
    for t in launched[5:]:
        assert (t.params["data_parallel_size"], t.params["enable_expert_parallel"]) == (2, True)
        assert t.params["tensor_parallel_size"] == 1
    # Each engine leased the devices it holds: TP x DP of them.
    for config in host.calls:
        assert len(config.env["CUDA_VISIBLE_DEVICES"].split(",")) == devices_of(config.args)
    started = [e.description for e in events if isinstance(e, TrialStarted)]
    assert started[0].endswith("(layout stage)") and started[-1].endswith("(scheduler stage)")


def test_a_dense_model_has_one_stage(
    make_spec: Callable[..., TuneSpec],
    summary_of: Callable[..., Summary],
    tiny_model: Path,
    tmp_path: Path,
) -> None:
    host = LayoutHost(summary_of)
    trials, _ = run_study(make_spec, tmp_path, host, tiny_model, [])
    assert all(t.stage == "" for t in trials)
    assert [t.role for t in trials].count("baseline") == 1


def test_the_winner_is_the_best_feasible_layout_and_the_baseline_while_none_is() -> None:
    def rec(number: int, speed: float, stage: str, feasible: bool = True, **params: Any) -> Any:
        return TrialRecord(
            number=number,
            state="complete",
            status="ok",
            role=keys.ROLE_BASELINE if number == 0 else "",
            stage=stage,
            params={"tensor_parallel_size": 1, "data_parallel_size": 1, **params},
            metrics={"output_throughput": speed},
            constraints={"p99_ttft_ms": 0.0 if feasible else 1.0},
        )

    objective = ("output_throughput", "maximize")
    names = ["tensor_parallel_size", "data_parallel_size"]
    records = [
        rec(0, 100, "layout"),
        rec(1, 300, "layout", feasible=False, tensor_parallel_size=2),
        rec(2, 200, "layout", data_parallel_size=2),
        rec(3, 900, "scheduler", tensor_parallel_size=2),  # not a layout trial
    ]
    assert layout_winner(records, names, objective) == {
        "tensor_parallel_size": 1,
        "data_parallel_size": 2,
    }
    none_feasible = [rec(0, 100, "layout", feasible=False), rec(1, 300, "layout", False)]
    assert layout_winner(none_feasible, names, objective) == {
        "tensor_parallel_size": 1,
        "data_parallel_size": 1,
    }
    assert layout_winner([], names, objective) == {}


def test_the_staged_sampler_leaves_the_layout_out_of_the_relative_search() -> None:
    sampler = StagedSampler(optuna.samplers.TPESampler(seed=0), LAYOUT, ("x", "maximize"))
    study = optuna.create_study(sampler=sampler)
    trial = study.ask()
    assert "tensor_parallel_size" not in sampler.infer_relative_search_space(
        study, study._storage.get_trial(trial._trial_id)
    )
