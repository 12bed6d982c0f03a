"""benchmarks/failure_share.py's naive arm (a plain Optuna loop, outside the tuner) against
the tuner's learned failures, on a scripted measure whose KV caches over 4 GiB run out of
memory: the same sampler and seed propose the same configs, and only the tuner stops
launching the ones a known OOM rules out."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from study.fakes import FakeMeasure

from autotune.bench import Summary
from autotune.engine import EngineConfig
from autotune.measure import Measurement
from autotune.space import load_space
from autotune.spec import TuneSpec
from autotune.store import StudyStore
from autotune.study import Harness, StudyRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from failure_share import run_naive, space_yaml

OOM_ABOVE = 4 * 2**30
TRIALS = 12


def oom_above(measure: FakeMeasure) -> Callable[[int, EngineConfig], Measurement]:
    def script(i: int, config: EngineConfig) -> Measurement:
        if config.args["kv_cache_memory_bytes"] > OOM_ABOVE:
            return Measurement(status="oom", reason="can't allocate memory", device_s=5.0)
        return measure.ok(config)

    return script


def test_the_naive_arm_launches_every_proposal_and_the_tuner_fewer_failures(
    tiny_model: Path, tmp_path: Path, summary_of: Callable[..., Summary]
) -> None:
    file = tmp_path / "half.yaml"
    file.write_text(space_yaml(12288))
    space = load_space(file)
    spec = TuneSpec.model_validate(
        {
            "study": "share",
            "model": str(tiny_model),
            "space": str(file),
            "root": tmp_path / "studies",
            "trials": TRIALS,
            "sampler": "random",
            "seed": 0,
        }
    )
    naive_measure = FakeMeasure(summary_of)
    naive_measure.script = oom_above(naive_measure)
    naive = run_naive(spec, space, naive_measure, tmp_path / "naive")
    assert naive["launched"] == TRIALS == len(naive_measure.calls)
    assert naive["failed"] > 0 and naive["failed_kinds"] == ["oom"]
    assert naive["best_output_tok_s"] > 0
    first = naive_measure.calls[0].args["kv_cache_memory_bytes"]
    assert first == 512 * 2**20  # the space's baseline first

    learned_measure = FakeMeasure(summary_of)
    learned_measure.script = oom_above(learned_measure)
    store = StudyStore(spec.storage_url)
    StudyRunner(Harness(spec, space, learned_measure), store).run()
    trials = store.trials("share")
    launched_ooms = [t for t in trials if t.status == "oom" and t.device_s is not None]
    assert any(t.status == "predicted_oom" for t in trials)
    print(f"OOMs launched: naive {naive['failed']} of {TRIALS}, tuner {len(launched_ooms)}")
    assert len(launched_ooms) < naive["failed"], (len(launched_ooms), naive)
