"""`tune --min-agreement`: a config that answers otherwise than the baseline cannot win.

The fake engine's `quantization: fp8` decodes 30% faster and gives other greedy outputs on some
prompts (tests/fake_engine.py): the config a study would pick for its speed, were its answers
not compared with the baseline's."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from support import one_error_line

from autotune.dashboard import Catalog, study_view
from autotune.measure import AGREEMENT
from autotune.store import StudyStore
from autotune.vocab import layout
from cli.conftest import invoke, tune_args

SPACE = """\
name: fp8-or-not
platform: cpu
fixed: {kv_cache_memory_bytes: 268435456}
parameters:
  - {name: quantization, type: categorical, choices: [null, fp8], baseline: null}
  - {name: max_num_seqs, type: categorical, choices: [4, 16], baseline: 4}
"""


def _tune(tiny_model: Path, root: Path, study: str, *more: str) -> None:
    space = root / "space.yaml"
    space.parent.mkdir(parents=True, exist_ok=True)
    space.write_text(SPACE)
    argv = tune_args(tiny_model, root, study, "--trials", "4", "--sampler", "random", *more)
    argv[argv.index("cpu-quick")] = space
    result = invoke(*argv)
    assert result.exit_code == 0, result.output


def test_a_config_that_answers_otherwise_is_infeasible_and_not_exported(
    tiny_model: Path, tmp_path: Path
) -> None:
    _tune(tiny_model, tmp_path, "g", "--min-agreement", "0.95")
    store = StudyStore(f"sqlite:///{tmp_path / 'g' / 'study.db'}", create=False)
    measured = [t for t in store.trials("g") if t.measured]
    assert len(measured) == 4 and measured[0].role == "baseline"
    assert measured[0].metrics["agreement_tokens"] == measured[0].metrics["agreement_exact"] == 1
    reference = store.load("g").user_attrs["agreement_reference"]
    assert reference["trial"] == 0 and len(reference["outputs"]) == 8
    fp8 = [t for t in measured if t.params["quantization"] == "fp8"]
    same = [t for t in measured if t.params["quantization"] is None]
    assert fp8 and same, [t.params for t in measured]
    for t in fp8:  # other outputs on some prompts: below the bound, so infeasible
        assert 0 < t.metrics["agreement_tokens"] < 0.95 and t.metrics["agreement_exact"] < 1
        assert t.constraints[AGREEMENT] > 0 and not t.feasible
    for t in same:
        assert t.metrics["agreement_tokens"] == 1.0 and t.constraints[AGREEMENT] <= 0
    for t in measured:
        kept = json.loads((Path(t.trial_dir or "") / layout.GREEDY).read_text())
        assert len(kept["outputs"]) == 8
    out = tmp_path / "best.yaml"
    assert invoke("export", "g", "--root", tmp_path, "-o", out).exit_code == 0
    assert "quantization" not in yaml.safe_load(out.read_text())
    assert "answers: 100% of the baseline's greedy tokens" in out.read_text()
    shown = invoke("show", "g", "--root", tmp_path, "--format", "json")
    assert '"agreement_tokens"' in shown.output
    table = invoke("show", "g", "--root", tmp_path, "--all").output
    assert "agree" in table and "ok (answers otherwise)" in table, table
    # The dashboard says what `show` says: the accuracy gate, not an SLO, ruled fp8 out.
    view = study_view(Catalog(tmp_path), "g")
    outcomes = {t.number: t.outcome for t in view.trials}
    assert {outcomes[t.number] for t in fp8} == {"answers otherwise"}, outcomes
    assert {outcomes[t.number] for t in same} <= {"ok", "misses SLO"}, outcomes
    groups = {trace["name"] for trace in view.figures["params"]["data"]}
    assert "ok, answers otherwise" in groups and "ok, misses SLO" not in groups, groups


def test_without_the_flag_nothing_is_compared(tiny_model: Path, tmp_path: Path) -> None:
    _tune(tiny_model, tmp_path, "n")
    store = StudyStore(f"sqlite:///{tmp_path / 'n' / 'study.db'}", create=False)
    for t in (t for t in store.trials("n") if t.measured):
        assert "agreement_tokens" not in t.metrics and AGREEMENT not in t.constraints
        assert not (Path(t.trial_dir or "") / layout.GREEDY).exists()


def test_the_bound_is_a_share(tiny_model: Path, tmp_path: Path) -> None:
    result = invoke(*tune_args(tiny_model, tmp_path, "b", "--min-agreement", "1.5"))
    assert "--min-agreement" in one_error_line(result)
    assert not (tmp_path / "b").exists()
