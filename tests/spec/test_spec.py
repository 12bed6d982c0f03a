"""TuneSpec: YAML + flags, validation messages, defaults."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

from autotune.bench import RandomWorkload
from autotune.spec import (
    SPEC_LIMIT,
    EngineSpec,
    SpecError,
    TuneSpec,
    load_spec,
    parse_objectives,
    parse_pairs,
    parse_slos,
)

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
    # The warm-up the workload leaves unset: two seconds of its arrivals at 4 requests/s.
    assert spec.workload == RandomWorkload(input=32, output=8, prompts=4, warmup=8)
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


# The spec's numbers whose bound is not a schema maximum, each checked by its own validator
# (the table below tries it): a rate may be `inf` (all at once), an SLO bound or factor is a
# mapping's value, `parallel` may be `auto`.
BOUNDED_BY_A_VALIDATOR = {
    "LoadProfile.rate": "inf: all at once",
    ".slos": "finite > 0",
    ".relative_slos": "finite > 0",
    ".parallel": "1 to MAX_PARALLEL, or auto",
}


def _numbers(node: object, path: str) -> list[tuple[str, dict]]:
    """Every integer or number in a JSON schema, by the path of its property."""
    found = []
    if isinstance(node, dict):
        if node.get("type") in ("integer", "number"):
            found.append((path, node))
        for key, value in node.items():
            inner = path if key in ("anyOf", "additionalProperties", "properties") else key
            found += _numbers(value, f"{path}.{inner}" if inner != path else path)
    elif isinstance(node, list):
        for value in node:
            found += _numbers(value, path)
    return found


def test_every_number_of_the_spec_has_an_upper_bound() -> None:
    # Issue 45, as a class: a number used before it is bounded (a seed past numpy's range,
    # a timeout past a timer's, `.inf` anywhere) failed deep inside. A field added without a
    # bound fails here.
    schema = TuneSpec.model_json_schema()
    numbers = _numbers(schema.get("$defs"), "") + _numbers(schema["properties"], "")
    assert len(numbers) > 40
    unbounded = sorted(
        path.removeprefix(".").replace("properties.", "").replace(".properties", "")
        for path, node in numbers
        if "maximum" not in node and "exclusiveMaximum" not in node
    )
    assert unbounded == sorted(name.removeprefix(".") for name in BOUNDED_BY_A_VALIDATOR), unbounded


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"seed": 2**32}, "--seed 4294967296: expected a number <= 4294967295"),
        ({"trials": 10**7}, "--trials 10000000: expected a number <= 1000000"),
        ({"repeats": 101}, "--repeats 101: expected a number <= 100"),
        ({"confirm": 10**9}, "--confirm 1000000000: expected a number <= 1000"),
        ({"confirm_rounds": 101}, "--confirm-rounds 101: expected a number <= 100"),
        ({"parallel": 10**6}, "--parallel 1000000: expected a number from 1 to 1024, or auto"),
        ({"device_cost_per_hour": math.inf}, "--device-cost-per-hour inf: expected a number <="),
        ({"min_agreement": math.nan}, "--min-agreement nan: expected a number <= 1"),
        ({"load": {"rate": math.nan}}, "--rate nan: expected a number > 0"),
        ({"load": {"rate": 1e7}}, "--rate 10000000.0: expected a number <= 1,000,000, or inf"),
        ({"load": {"concurrency": 10**20}}, "--concurrency 100000000000000000000: expected a"),
        ({"load": {"request_timeout_s": math.inf}}, "load.request_timeout_s: expected a number"),
        ({"engine": {"startup_timeout_s": math.inf}}, "engine.startup_timeout_s: expected a"),
        ({"engine": {"hang_timeout_s": 1e300}}, "engine.hang_timeout_s: expected a number <="),
        ({"slos": {"p99_ttft_ms": math.inf}}, "SLO p99_ttft_ms=inf: a bound must be a finite"),
        ({"relative_slos": {"p99_ttft_ms": math.inf}}, "--slo: SLO p99_ttft_ms=baseline*inf: a"),
        ({"engine": {"options": {"max_num_seqs": 10**20}}}, "max_num_seqs: must be <= 2,147,"),
        ({"engine": {"options": {"gpu_memory_utilization": math.inf}}}, "must be in (0, 1]"),
        ({"engine": {"options": {"seed": 2**32}}}, "seed: must be <= 4,294,967,295"),
        ({"workload": "random:prompts=1000001"}, "workload key 'prompts': expected a number <="),
        (
            {"workload": "random:input=1000,prompts=1000000"},
            "1,064,002,128 tokens to generate, more than 100,000,000",
        ),
        ({"workload": "random:seed=-1"}, "workload key 'seed': expected a number >= 0"),
        ({"workload": "trace:path=t.csv,rate_scale=inf"}, "workload key 'rate_scale': expected"),
        ({"workload": "shared-prefix:prefix=99999999"}, "workload key 'prefix': expected a"),
    ],
    ids=lambda v: str(v)[:40] if isinstance(v, dict) else None,
)
def test_a_number_past_its_bound_is_refused_in_one_line(overrides: dict, expected: str) -> None:
    message = spec_error(None, {"study": "s", "model": "m", **overrides})
    assert expected in message, message


def test_a_relative_slo_factor_that_is_not_finite_names_the_flag_typed() -> None:
    # Issue 45: `--slo p99_ttft_ms=baseline*inf` named a flag that does not exist.
    for text in ("baseline*inf", "baseline*nan", "baseline*1e400"):
        with pytest.raises(SpecError) as info:
            parse_slos([f"p99_ttft_ms={text}"])
        assert str(info.value).startswith(f"--slo 'p99_ttft_ms={text}': expected baseline*FACTOR")
        assert "with a finite factor > 0" in str(info.value)
    given = {"study": "s", "model": "m", "relative_slos": {"p99_ttft_ms": -1}}
    assert "--relative-slos" not in spec_error(None, given)


def test_a_field_without_a_flag_is_named_by_its_field_not_by_a_made_up_flag() -> None:
    # `worker` and `confirm` pass a stored spec as values: `--max-error-rate` and
    # `--load-request-timeout-s` are no flags of autotune's.
    given = {"study": "s", "model": "m", "max_error_rate": 2.0}
    assert spec_error(None, given) == "max_error_rate: expected a number <= 1 (got 2.0)"
    given = {"study": "s", "model": "m", "load": {"rate": 1, "request_timeout_s": math.inf}}
    assert spec_error(None, given) == (
        "load.request_timeout_s: expected a number <= 604800 (got inf)"
    )


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"root": "a" * 256}, "has a name of 256 bytes"),
        ({"root": "studies/a\0b"}, "holds a control character ('\\x00')"),
        ({"root": "/".join(["d" * 200] * 21)}, "a path may be at most 4,095"),
        ({"root": "{file}/sub"}, "is a file"),
        ({"model": "./" + "m" * 300}, "--model"),
        ({"model": "org/model\n"}, "holds a control character"),
        ({"storage": f"sqlite:///{'s' * 256}/x.db"}, "has a name of 256 bytes"),
        ({"storage": "sqlite:///{file}/x.db"}, "is a file"),
        ({"study": "s" * 129}, "--study"),
    ],
    ids=[
        *("root-name", "root-nul", "root-long", "root-under-a-file", "model-name"),
        *("model-newline", "storage-name", "storage-under-a-file", "study-long"),
    ],
)
def test_a_path_no_file_system_holds_is_refused_before_anything_is_made(
    tmp_path: Path, overrides: dict, expected: str
) -> None:
    file = tmp_path / "a-file"
    file.write_text("x")
    given = {k: v.replace("{file}", str(file)) for k, v in overrides.items()}
    assert expected in spec_error(None, {"study": "s", "model": "m", **given})
    assert sorted(tmp_path.iterdir()) == [file]


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: Path("/dev/zero"), "spec /dev/zero: not a regular file"),
        (lambda p: (os.mkfifo(p / "fifo"), p / "fifo")[1], "fifo: not a regular file"),
        (lambda p: _sparse(p / "big.yaml", SPEC_LIMIT + 1), "larger than 1 MiB"),
        (lambda p: p, "is a folder, not a file"),
    ],
    ids=["device", "fifo", "too-large", "folder"],
)
def test_a_spec_file_is_read_within_a_bound(tmp_path: Path, make: object, expected: str) -> None:
    # Issue 45: `--spec /dev/zero` grew until memory ran out.
    assert expected in spec_error(make(tmp_path), {})  # type: ignore[operator]


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as out:
        out.truncate(size)
    return path


def test_every_engine_limit_the_docs_name_is_a_spec_field() -> None:
    # A doc once named `engine.stop_timeout_s`, which the spec refuses.
    root = Path(__file__).resolve().parents[2]
    texts = [p.read_text() for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]]
    named = {m for text in texts for m in re.findall(r"`engine\.(\w+_s)`", text)}
    assert named and named <= set(EngineSpec.model_fields), named - set(EngineSpec.model_fields)
