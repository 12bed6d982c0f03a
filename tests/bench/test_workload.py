"""Workload parsing and reproducible request building."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from autotune.bench import (
    JsonlWorkload,
    RandomWorkload,
    RequestSpec,
    SharedPrefixWorkload,
    WorkloadError,
    build_requests,
    parse_workload,
)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    config = {"vocab_size": 40, "bos_token_id": 0, "eos_token_id": [1, 3], "pad_token_id": None}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_parse_random_cli_form() -> None:
    workload = parse_workload("random:input=128,output=32,prompts=10,seed=7,input_spread=0.5")
    assert workload == RandomWorkload(input=128, output=32, prompts=10, seed=7, input_spread=0.5)


def test_parse_defaults_and_dict_form() -> None:
    assert parse_workload("random") == RandomWorkload()
    workload = parse_workload({"type": "jsonl", "path": "data.jsonl", "prompts": 5})
    assert workload == JsonlWorkload(path=Path("data.jsonl"), prompts=5)
    assert parse_workload("jsonl:path=data.jsonl,prompts=100,output=8") == JsonlWorkload(
        path=Path("data.jsonl"), prompts=100, output=8
    )


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("random:inptu=3", "'inptu'"),
        ("random:input=abc", "'input'"),
        ("random:output=0", "'output'"),
        ("random:input_spread=1.5", "'input_spread'"),
        ("random:input", "'input'"),
        ("random:seed=1,seed=2", "'seed'"),
        ("jsonl:prompts=3", "'path'"),
        ("jsonl:path=x,input=3", "'input'"),
        ("sharegpt:path=x", "'sharegpt'"),
        ("shared-prefix:group=3", "'group' (did you mean 'groups'?)"),
        ("shared-prefix:prefix=0", "'prefix'"),
        # Issue 45: every count of the string bounded, every number finite.
        ("random:prompts=1000001", "'prompts': expected a number <= 1000000"),
        ("random:input=16777217", "'input': expected a number <= 16777216"),
        ("random:output=99999999999999999999", "'output': expected a number <= 16777216"),
        ("random:warmup=1000001", "'warmup': expected a number <= 1000000"),
        ("random:seed=4294967296", "'seed': expected a number <= 4294967295"),
        ("random:seed=-1", "'seed': expected a number >= 0"),
        ("random:output_spread=nan", "'output_spread'"),
        ("random:input=100000,prompts=1001", "100,364,192 tokens to generate, more than"),
        ("shared-prefix:groups=1000001", "'groups': expected a number <= 1000000"),
        ("shared-prefix:prefix=1000000,groups=100", "101,008,448 tokens to generate"),
        ("jsonl:path=x,output=16777217", "'output': expected a number <= 16777216"),
        ("jsonl:path=x,prompts=0", "'prompts': expected a number >= 1"),
        ("trace:path=x,rate_scale=inf", "'rate_scale': expected a number <= 1e+06"),
        ("trace:path=x,rate_scale=nan", "'rate_scale'"),
        ("trace:path=x,block=16777217", "'block': expected a number <= 16777216"),
    ],
)
def test_parse_errors_name_the_key(text: str, needle: str) -> None:
    with pytest.raises(WorkloadError) as info:
        parse_workload(text)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message


def test_random_requests_are_seeded(model_dir: Path) -> None:
    workload = RandomWorkload(
        input=20, output=6, prompts=30, input_spread=0.5, warmup=3, seed=4, prompt_format="ids"
    )
    warmup, measured = build_requests(workload, str(model_dir))
    assert (warmup, measured) == build_requests(workload, str(model_dir))
    assert len(warmup) == 3 and len(measured) == 30
    other = build_requests(workload.model_copy(update={"seed": 5}), str(model_dir))
    assert other[1] != measured
    for spec in warmup + measured:
        assert isinstance(spec.prompt, list)
        assert 10 <= len(spec.prompt) <= 30
        assert spec.max_tokens == 6
        assert all(0 <= token < 40 and token not in (0, 1, 3) for token in spec.prompt)
    assert len({len(spec.prompt) for spec in measured}) > 1


def test_random_text_prompts_encode_to_the_asked_length(tiny_model: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    workload = RandomWorkload(input=100, output=8, prompts=20, input_spread=0.3, warmup=0)
    _, measured = build_requests(workload, str(tiny_model))
    assert measured == build_requests(workload, str(tiny_model))[1]
    lengths = [len(tokenizer.encode(str(s.prompt), add_special_tokens=False).ids) for s in measured]
    ids_workload = workload.model_copy(update={"prompt_format": "ids"})
    _, as_ids = build_requests(ids_workload, str(tiny_model))
    assert all(isinstance(s.prompt, str) for s in measured)
    # Same seed, same lengths: text prompts encode to exactly the drawn token counts.
    assert lengths == [len(s.prompt) for s in as_ids]


def test_shared_prefix_groups_share_exact_prefixes(model_dir: Path) -> None:
    text = "shared-prefix:groups=3,prefix=20,input=5,output=7,prompts=10,warmup=2,prompt_format=ids"
    workload = parse_workload(text)
    assert workload == SharedPrefixWorkload(
        groups=3, prefix=20, input=5, output=7, prompts=10, warmup=2, prompt_format="ids"
    )
    warmup, measured = build_requests(workload, str(model_dir))
    assert (warmup, measured) == build_requests(workload, str(model_dir))  # seeded
    assert len(warmup) == 2 and len(measured) == 10
    assert all(len(s.prompt) == 25 and s.max_tokens == 7 for s in [*warmup, *measured])
    heads = [tuple(s.prompt[:20]) for s in measured]
    # 10 requests over 3 groups: 4, 3 and 3, interleaved rather than one group after another.
    assert sorted(heads.count(h) for h in set(heads)) == [3, 3, 4]
    assert heads != sorted(heads, key=heads.index)
    # Requests differ after the prefix; the warm-up's prefix is none of the measured ones.
    assert len({tuple(s.prompt[20:]) for s in measured}) == 10
    assert {tuple(s.prompt[:20]) for s in warmup} & set(heads) == set()
    other = build_requests(workload.model_copy(update={"seed": 1}), str(model_dir))[1]
    assert other != measured


def test_shared_prefix_text_keeps_each_prefix_one_string(tiny_model: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    workload = SharedPrefixWorkload(groups=2, prefix=64, input=16, prompts=6, warmup=0)
    _, measured = build_requests(workload, str(tiny_model))
    prompts = [str(s.prompt) for s in measured]
    heads = {p[: len(p) - len(p.split("\n")[-1])] for p in prompts}
    assert len(heads) == 2
    for prompt in prompts:  # about prefix + newline + input tokens, as the server counts them
        assert 64 + 16 <= len(tokenizer.encode(prompt, add_special_tokens=False).ids) <= 64 + 20


def test_text_prompts_need_a_tokenizer(model_dir: Path) -> None:
    with pytest.raises(WorkloadError, match=r"tokenizer\.json"):
        build_requests(RandomWorkload(), str(model_dir))


def test_random_workload_needs_local_model() -> None:
    with pytest.raises(WorkloadError, match="local model folder"):
        build_requests(RandomWorkload(), "meta-llama/Llama-3-8B")


def _write_lines(path: Path, items: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(item) for item in items) + "\n")
    return path


def test_jsonl_prompt_lines_and_sharegpt(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "data.jsonl",
        [
            {"prompt": "hello there", "output_tokens": 5},
            {"prompt": "bye", "max_tokens": 7},
            {
                "conversations": [
                    {"from": "human", "value": "hi?"},
                    {"from": "gpt", "value": "a b c"},
                ]
            },
            {"conversations": [{"from": "gpt", "value": "no human turn: skipped"}]},
        ],
    )
    warmup, measured = build_requests(JsonlWorkload(path=path, warmup=0), "unused")
    assert warmup == []
    assert sorted(measured, key=lambda spec: str(spec.prompt)) == [
        RequestSpec("bye", 7),
        RequestSpec("hello there", 5),
        RequestSpec("hi?", 4),  # 3 words * 4 // 3
    ]
    _, fixed = build_requests(JsonlWorkload(path=path, output=2, warmup=0), "unused")
    assert {spec.max_tokens for spec in fixed} == {2}


def test_sharegpt_json_list(tmp_path: Path) -> None:
    data = [
        {"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "x"}]}
        for i in range(4)
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    warmup, measured = build_requests(JsonlWorkload(path=path, prompts=3, warmup=1), "unused")
    assert len(measured) == 3 and len(warmup) == 1
    assert {s.prompt for s in warmup + measured} == {"q0", "q1", "q2", "q3"}  # warm-up unmeasured
    assert all(spec.max_tokens == 1 for spec in measured)


def test_jsonl_cycles_and_is_seeded(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "d.jsonl", [{"prompt": f"p{i}", "output_tokens": 3} for i in range(5)]
    )
    workload = JsonlWorkload(path=path, prompts=12, seed=3)
    assert build_requests(workload, "x") == build_requests(workload, "x")
    _, measured = build_requests(workload, "x")
    assert len(measured) == 12 and measured[:5] == measured[5:10]


@pytest.mark.parametrize("kind", ["jsonl", "trace"])
@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: Path("/dev/zero"), "/dev/zero: not a regular file"),
        (lambda p: (os.mkfifo(p / "fifo"), p / "fifo")[1], "fifo: not a regular file"),
        (lambda p: _sparse(p / "big.jsonl", 768 * 1024 * 1024 + 1), "larger than 768 MiB"),
        (lambda p: p / ("n" * 256), "has a name of 256 bytes"),
    ],
    ids=["device", "fifo", "too-large", "name-too-long"],
)
def test_a_prompt_or_trace_file_is_read_within_a_bound(
    tmp_path: Path, model_dir: Path, kind: str, make: object, needle: str
) -> None:
    # Issue 45: a file from the user was read whole, whatever it was.
    path = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(WorkloadError) as info:
        build_requests(parse_workload({"type": kind, "path": path}), str(model_dir))
    assert needle in str(info.value) and "\n" not in str(info.value)


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as out:
        out.truncate(size)  # no disk taken
    return path


def test_jsonl_errors(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="cannot read dataset"):
        build_requests(JsonlWorkload(path=tmp_path / "missing.jsonl"), "x")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "output_tokens": 1}\n\n{oops\n')
    with pytest.raises(WorkloadError, match="line 3"):
        build_requests(JsonlWorkload(path=bad), "x")
    bad.write_text('{"prompt": "a"}\n')
    with pytest.raises(WorkloadError, match=r"line 1.*output_tokens"):
        build_requests(JsonlWorkload(path=bad), "x")
    bad.write_text('{"prompt": "a", "output_tokens": 100000000000}\n')
    with pytest.raises(WorkloadError, match=r"line 1.*output_tokens.*from 1 to 16,777,216"):
        build_requests(JsonlWorkload(path=bad), "x")
    bad.write_bytes(
        b'{"prompt": "a", "output_tokens": 1}\n{"prompt": "hi \xff", "output_tokens": 1}\n'
    )
    with pytest.raises(WorkloadError, match=r"bad.jsonl: line 2: not UTF-8 text \(byte 0xff\)"):
        build_requests(JsonlWorkload(path=bad), "x")
