"""`tune --search goal|pareto`: what Optuna is told, what is stored and shown, and resume."""

from __future__ import annotations

from pathlib import Path

from autotune.store import StudyStore
from cli.conftest import invoke, tune_args


def _store(root: Path, study: str) -> StudyStore:
    return StudyStore(f"sqlite:///{root / study / 'study.db'}", create=False)


def test_the_default_search_is_goal_directed_and_keeps_every_objective(
    tiny_model: Path, tmp_path: Path
) -> None:
    result = invoke(*tune_args(tiny_model, tmp_path, "g", "--trials", "3"))
    assert result.exit_code == 0, result.output
    store = _store(tmp_path, "g")
    assert store.study_facts("g").search == "goal"
    assert [d.name for d in store.load("g").directions] == ["MAXIMIZE"]  # the first objective
    launched = [t for t in store.trials("g") if t.device_s is not None]
    assert len(launched) == 3
    for t in launched:
        assert t.values is not None and len(t.values) == 1
        assert t.values[0] == t.metrics["output_throughput"]
        assert {"p99_ttft_ms", "p99_tpot_ms"} <= set(t.metrics)  # every objective is measured
    assert "Pareto front of" in result.output
    exported = invoke("export", "g", "--root", tmp_path, "-o", tmp_path / "best.yaml")
    assert exported.exit_code == 0, exported.output
    assert (tmp_path / "best.yaml").read_text().startswith("# vllm-autotune")


def test_pareto_search_tells_every_objective(tiny_model: Path, tmp_path: Path) -> None:
    result = invoke(*tune_args(tiny_model, tmp_path, "p", "--trials", "2", "--search", "pareto"))
    assert result.exit_code == 0, result.output
    store = _store(tmp_path, "p")
    assert len(store.load("p").directions) == 3
    assert all(len(t.values or []) == 3 for t in store.trials("p") if t.device_s is not None)


def test_a_study_continues_only_with_its_own_search(tiny_model: Path, tmp_path: Path) -> None:
    first = invoke(*tune_args(tiny_model, tmp_path, "c", "--trials", "1", "--search", "pareto"))
    assert first.exit_code == 0, first.output
    before = len(_store(tmp_path, "c").trials("c"))
    again = invoke(*tune_args(tiny_model, tmp_path, "c", "--trials", "2"))  # the default: goal
    assert again.exit_code == 2  # bad input: the study exists with another search
    lines = [line for line in again.output.splitlines() if line.strip()]
    assert lines[-1] == (
        "error: study 'c' was run with --search pareto: continue it with --search pareto, "
        "or use another --study name"
    )
    assert len(_store(tmp_path, "c").trials("c")) == before  # nothing stored was touched


def test_an_older_study_of_several_objectives_is_taken_as_pareto(
    tiny_model: Path, tmp_path: Path
) -> None:
    """A study made before `search` existed has no such attribute; its objectives say."""
    first = invoke(*tune_args(tiny_model, tmp_path, "o", "--trials", "1", "--search", "pareto"))
    assert first.exit_code == 0, first.output
    store = _store(tmp_path, "o")
    study = store.load("o")
    study._storage.set_study_user_attr(study._study_id, "search", None)
    again = invoke(*tune_args(tiny_model, tmp_path, "o", "--trials", "2", "--search", "pareto"))
    assert again.exit_code == 0, again.output
    assert len([t for t in _store(tmp_path, "o").trials("o") if t.device_s is not None]) == 2


SPECULATIVE = """
name: spec
platform: cpu
fixed:
  enforce_eager: true
  kv_cache_memory_bytes: 268435456
parameters:
  - name: method
    type: categorical
    option: speculative_config.method
    choices: [null, ngram]
    baseline: null
  - name: tokens
    type: int
    option: speculative_config.num_speculative_tokens
    low: 1
    high: 6
    baseline: 3
    only_if: {method: [ngram]}
"""


def test_values_that_are_not_set_do_not_make_another_config(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Without a method, the token count is left out: proposals that differ only there are
    the same engine, launched once; the rest are skipped as duplicates."""
    space = tmp_path / "spec.yaml"
    space.write_text(SPECULATIVE)
    argv = tune_args(tiny_model, tmp_path, "sp", "--trials", "5", "--sampler", "random")
    argv[argv.index("cpu-quick")] = space
    result = invoke(*argv)
    assert result.exit_code == 0, result.output
    trials = _store(tmp_path, "sp").trials("sp")
    launched = [t for t in trials if t.device_s is not None]
    configs = [
        t.config.get("speculative-config", t.config.get("speculative_config")) for t in launched
    ]
    assert len(launched) == 5 and len({repr(c) for c in configs}) == 5
    assert sum(c is None for c in configs) == 1  # no speculation: one engine
    assert any(t.status == "duplicate" and t.params["method"] is None for t in trials)


DERIVED = """
name: derived
platform: cpu
fixed:
  kv_cache_memory_bytes: 268435456
parameters:
  - name: max_num_seqs
    type: categorical
    choices: [8, 16]
    baseline: 16
  - name: max_cudagraph_capture_size
    type: categorical
    choices: [decode_batch, 8, 16]
    derived: [decode_batch]
    baseline: decode_batch
"""


def test_a_derived_choice_equal_to_a_number_is_the_same_config(
    tiny_model: Path, tmp_path: Path
) -> None:
    """decode_batch is max_num_seqs here: (8, decode_batch) launches what (8, 8) launches, so
    six proposals are four engines, each launched once, the engine's YAML holding the number."""
    space = tmp_path / "derived.yaml"
    space.write_text(DERIVED)
    argv = tune_args(tiny_model, tmp_path, "dv", "--trials", "4", "--sampler", "random")
    argv[argv.index("cpu-quick")] = space
    result = invoke(*argv)
    assert result.exit_code == 0, result.output
    trials = _store(tmp_path, "dv").trials("dv")
    launched = [t for t in trials if t.device_s is not None]
    engines = {(t.config["max-num-seqs"], t.config["max-cudagraph-capture-size"]) for t in launched}
    assert len(launched) == 4 and engines == {(8, 8), (8, 16), (16, 8), (16, 16)}
    assert trials[0].config["max-cudagraph-capture-size"] == 16  # the baseline: 16 sequences
