"""TuneSpec: YAML + flags, validation messages, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.bench import RandomWorkload
from autotune.spec import SpecError, TuneSpec, load_spec
from autotune.spec_flags import parse_objectives, parse_pairs

SPEC_YAML = """\
study: from-file
model: /models/tiny
space: cpu-quick
trials: 5
workload: random:input=32,output=8,prompts=4
load: {rate: 4, request_timeout_s: 60}
slos: {p99_ttft_ms: 500}
engine:
  command: "{python} fake.py"
  options: {max-model-len: 1024}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tune.yaml"
    path.write_text(text)
    return path


def spec_error(path: Path | None, overrides: dict) -> str:
    with pytest.raises(SpecError) as exc:
        load_spec(path, overrides)
    message = str(exc.value)
    assert "\n" not in message
    assert "Value error" not in message  # pydantic's wording is not for users
    return message


def test_load_from_yaml(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, SPEC_YAML), {})
    assert spec.study == "from-file" and spec.trials == 5 and spec.space == "cpu-quick"
    assert spec.workload == RandomWorkload(input=32, output=8, prompts=4)
    assert spec.load.rate == 4 and spec.load.request_timeout_s == 60
    assert spec.slos == {"p99_ttft_ms": 500.0}
    assert spec.engine.command == "{python} fake.py"
    assert spec.engine.options == {"max_model_len": 1024}  # spelled one way
    assert spec.objectives[1].metric == "p99_ttft_ms" and len(spec.objectives) == 3


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    overrides = {
        "study": "from-flags",
        "trials": 9,
        "space": None,  # a flag not given leaves the file's value
        "load": {"rate": 16.0, "concurrency": None},
        "engine": {"options": {"max_num_seqs": 8}},
        "slos": {"p99_tpot_ms": 50.0},
    }
    spec = load_spec(write(tmp_path, SPEC_YAML), overrides)
    assert spec.study == "from-flags" and spec.trials == 9
    assert spec.space == "cpu-quick"
    assert spec.load.rate == 16.0 and spec.load.concurrency is None
    assert spec.load.request_timeout_s == 60  # the file's other load fields stay
    assert spec.engine.command == "{python} fake.py"  # engine fields merge too
    assert spec.engine.options == {"max_num_seqs": 8}
    assert spec.slos == {"p99_tpot_ms": 50.0}


def test_flags_alone(tmp_path: Path) -> None:
    spec = load_spec(None, {"study": "s", "model": "m", "workload": "random:prompts=3"})
    assert spec.workload.prompts == 3
    assert spec.load.rate == 8.0 and spec.trials == 8
    # The default search is goal-directed, its sampler the one the benchmark chose.
    assert spec.search == "goal" and spec.sampler == "auto"


def test_bad_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "study: [unclosed\n")
    assert spec_error(path, {}).startswith(f"{path}: invalid YAML")


def test_spec_must_be_a_mapping(tmp_path: Path) -> None:
    assert "must be a mapping" in spec_error(write(tmp_path, "- a\n- b\n"), {})


def test_missing_spec_file(tmp_path: Path) -> None:
    assert "cannot read spec" in spec_error(tmp_path / "none.yaml", {})


def test_unknown_field_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "study: s\nmodel: m\ntrails: 3\n")
    assert spec_error(path, {}) == f"{path}: trails: unknown field (did you mean 'trials'?)"


def test_unknown_nested_field_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "study: s\nmodel: m\nengine: {comand: x}\n")
    assert spec_error(path, {}).startswith(f"{path}: engine.comand: ")


def test_missing_required_field() -> None:
    assert spec_error(None, {"study": "s"}).startswith("--model is required")


def test_unknown_slo_metric() -> None:
    message = spec_error(None, {"study": "s", "model": "m", "slos": {"p99_foo_ms": 1.0}})
    assert message.startswith("--slo: unknown SLO metric 'p99_foo_ms'; known: ")
    assert "p99_ttft_ms" in message


def test_unknown_objective_metric() -> None:
    objectives = [{"metric": "speed", "direction": "maximize"}]
    message = spec_error(None, {"study": "s", "model": "m", "objectives": objectives})
    assert message.startswith("--objective: unknown metric 'speed'")


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        ("random:inptu=32", "--workload random:inptu=32: unknown workload key 'inptu' (did "),
        ("random:input=x", "--workload random:input=x: workload key 'input': expected a whole"),
        ("bogus", "--workload bogus: unknown workload type 'bogus'"),
        ("random:input", "--workload random:input: workload option 'input' is not of the form"),
    ],
)
def test_bad_workload_string(workload: str, expected: str) -> None:
    assert spec_error(None, {"study": "s", "model": "m", "workload": workload}).startswith(expected)


def test_bad_study_name() -> None:
    assert spec_error(None, {"study": "a b", "model": "m"}).startswith("--study 'a b': expected")


def test_bad_value_names_the_field_and_counts_the_rest() -> None:
    message = spec_error(None, {"study": "s", "model": "m", "trials": 0, "sampler": "grid"})
    assert message.startswith("--trials 0: expected a number >= 1") and message.endswith(
        "(and 1 more)"
    )


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"load": {"rate": 0}}, "--rate 0: expected a number > 0"),
        ({"load": {"concurrency": 0}}, "--concurrency 0: expected a number >= 1"),
        ({"scenario": "batch"}, "--scenario batch: expected 'online' or 'offline'"),
        ({"sampler": "grid"}, "--sampler grid: expected 'auto', 'tpe'"),
        ({"engine": {"command": 3}}, "--engine-command 3: expected a text value"),
    ],
)
def test_a_flag_value_is_named_by_its_flag(overrides: dict, expected: str) -> None:
    assert spec_error(None, {"study": "s", "model": "m", **overrides}).startswith(expected)


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        ({"options": {"max_modl_len": 64}}, "did you mean 'max_model_len'?"),
        ({"command": "  "}, "--engine-command '  ': must not be empty"),
    ],
)
def test_engine_typos_and_blanks_are_refused(engine: dict, expected: str) -> None:
    assert expected in spec_error(None, {"study": "s", "model": "m", "engine": engine})


def test_an_option_close_to_no_known_one_passes_as_it_is() -> None:
    spec = load_spec(None, {"study": "s", "model": "m", "engine": {"options": {"zz_new": 1}}})
    assert spec.engine.options == {"zz_new": 1}


def test_root_must_be_a_folder(tmp_path: Path) -> None:
    file = write(tmp_path, "x: 1\n")
    assert spec_error(None, {"study": "s", "model": "m", "root": file}).startswith("--root ")


def test_a_file_value_is_named_by_its_field(tmp_path: Path) -> None:
    path = write(tmp_path, "study: s\nmodel: m\nload: {rate: 0}\n")
    assert spec_error(path, {}) == f"{path}: load.rate: expected a number > 0 (got 0)"
    path = write(tmp_path, "study: s\nmodel: m\nload: {rat: 4}\n")
    assert spec_error(path, {}) == f"{path}: load.rat: unknown field (did you mean 'rate'?)"


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "study: s\nmodel: [unclosed\n")
    assert spec_error(path, {}).startswith(f"{path}: invalid YAML at line 3, column 1: ")


def test_parse_pairs() -> None:
    assert parse_pairs(["p99_ttft_ms=2000", " p99_tpot_ms = 50.5"], "--slo") == {
        "p99_ttft_ms": 2000.0,
        "p99_tpot_ms": 50.5,
    }
    assert parse_pairs([], "--slo") == {}


@pytest.mark.parametrize("item", ["p99_ttft_ms", "p99_ttft_ms=fast", "p99_ttft_ms:2000"])
def test_parse_pairs_errors(item: str) -> None:
    with pytest.raises(SpecError, match=r"^--slo '.*': expected NAME=NUMBER"):
        parse_pairs([item], "--slo")


def test_parse_objectives() -> None:
    assert parse_objectives(["output_throughput:max", "p99_ttft_ms:minimize"]) == [
        {"metric": "output_throughput", "direction": "maximize"},
        {"metric": "p99_ttft_ms", "direction": "minimize"},
    ]


@pytest.mark.parametrize("item", ["output_throughput", "output_throughput:up", ":max:min"])
def test_parse_objectives_errors(item: str) -> None:
    with pytest.raises(SpecError, match=r"expected METRIC:max or METRIC:min"):
        parse_objectives([item])


def test_default_storage_is_sqlite_beside_the_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = TuneSpec(study="s1", model="m")
    assert spec.study_dir == Path("studies/s1")
    assert spec.storage_url == f"sqlite:///{tmp_path.resolve()}/studies/s1/study.db"
    assert TuneSpec(study="s1", model="m", storage="postgresql://h/db").storage_url == (
        "postgresql://h/db"
    )


def test_api_model_name() -> None:
    assert TuneSpec(study="s", model="/models/tiny").api_model_name == "tiny"
    assert TuneSpec(study="s", model="/m/tiny", served_model_name="x").api_model_name == "x"
