"""`vllm bench serve` as the load client: its command line, its result read back as records,
and the client run against a stand-in command (tests/fake_vllm_bench.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from vllm_child import VllmChild

from autotune.bench import (
    AbortKind,
    BenchmarkAborted,
    Guard,
    LoadProfile,
    RequestSpec,
    VllmBenchClient,
    VllmBenchError,
    check_workload,
    parse_workload,
    summarize,
)
from autotune.bench._vllm_bench import VLLM_BENCH, bench_argv, records_from_result, write_dataset

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm_bench"
FAKE = (sys.executable, str(Path(__file__).parents[1] / "fake_vllm_bench.py"))


def recorded() -> dict[str, object]:
    data: dict[str, object] = json.loads((FIXTURES / "result_detailed_5.json").read_text())
    return data


def test_records_of_a_recorded_result_give_vllms_own_statistics() -> None:
    """From vLLM's raw per-request timings, bench/_metrics.py computes the medians and means
    vLLM printed for the same run (over its successful requests), to the microsecond."""
    result = recorded()
    records = records_from_result(result, 5)
    assert [r.index for r in records] == [0, 1, 2, 3, 4]
    failed = records[2]
    assert failed.error == "Bad Request" and failed.token_times == () and failed.output_tokens == 0
    good = [r for r in records if r.ok]
    assert len(good) == 4 and all(len(r.token_times) == r.output_tokens == 8 for r in good)
    summary = summarize(records)
    assert (summary.completed, summary.errors) == (4, 1)
    for ours, theirs in (
        (summary.ttft_ms.p50, "median_ttft_ms"),
        (summary.ttft_ms.mean, "mean_ttft_ms"),
        (summary.tpot_ms.p50, "median_tpot_ms"),
        (summary.tpot_ms.mean, "mean_tpot_ms"),
        (summary.itl_ms.mean, "mean_itl_ms"),
        (summary.e2e_ms.p50, "median_e2el_ms"),
    ):
        assert ours == pytest.approx(result[theirs], abs=1e-3), theirs
    # vLLM's output throughput is the whole run's (ramp and drain included): ours beside it.
    assert summary.run_output_throughput == pytest.approx(result["output_throughput"], rel=0.02)


def test_a_result_without_per_request_fields_is_one_clear_error() -> None:
    result = {k: v for k, v in recorded().items() if k != "itls"}
    with pytest.raises(VllmBenchError, match=r"no per-request itls .*--save-detailed"):
        records_from_result(result, 5)
    with pytest.raises(VllmBenchError, match="for 6 requests"):
        records_from_result(recorded(), 6)


def test_the_command_line_carries_the_profile_and_the_request_body(tmp_path: Path) -> None:
    def argv(profile: LoadProfile) -> list[str]:
        return bench_argv(
            "http://h:1", "m", "/tok", profile, tmp_path / "d.jsonl", tmp_path / "r.json", 7
        )

    def value(args: list[str], flag: str) -> str | None:
        return args[args.index(flag) + 1] if flag in args else None

    closed = argv(LoadProfile(concurrency=16, seed=3))
    assert tuple(closed[: len(VLLM_BENCH)]) == VLLM_BENCH
    assert value(closed, "--request-rate") == "inf" and value(closed, "--max-concurrency") == "16"
    assert value(closed, "--seed") == "3" and value(closed, "--num-prompts") == "7"
    assert value(closed, "--temperature") == "0" and "--ignore-eos" in closed
    assert {"--save-detailed", "--disable-shuffle", "--skip-chat-template"} <= set(closed)
    assert value(closed, "--dataset-name") == "custom"
    assert value(closed, "--custom-output-len") == "-1"  # each row's own output_tokens
    poisson = argv(LoadProfile(rate=2.5))
    assert value(poisson, "--request-rate") == "2.5" and "--max-concurrency" not in poisson
    assert value(poisson, "--burstiness") == "1.0"  # Poisson, as LoadProfile's arrivals


PARSE = """
import json, sys
from vllm.benchmarks.serve import add_cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
keys = json.loads(sys.argv[2])
out = []
for argv in json.loads(sys.argv[1]):
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = vars(parser.parse_args(argv))
    out.append({k: repr(args[k]) if isinstance(args[k], float) else args[k] for k in keys})
print(json.dumps(out))
"""
KEYS = (
    "backend", "dataset_name", "custom_output_len", "request_rate", "max_concurrency",
    "num_prompts", "ignore_eos", "save_detailed", "disable_shuffle", "skip_chat_template",
    "temperature", "burstiness", "ready_check_timeout_sec", "seed", "result_dir",
    "result_filename", "save_result", "dataset_path", "percentile_metrics",
)  # fmt: skip


def parsed_by_vllm(child: VllmChild, *argvs: list[str]) -> list[dict[str, Any]]:
    """vLLM's own `bench serve` parser on our flags, in the session's vLLM child for all of
    them (tests/vllm_child.py)."""
    lists = [argv[len(VLLM_BENCH) :] for argv in argvs]
    out = child.run(PARSE, json.dumps(lists), json.dumps(KEYS))
    assert out.returncode == 0, out.stderr[-2000:]
    parsed: list[dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return parsed


@pytest.mark.xdist_group("vllm")
def test_vllms_own_parser_accepts_the_command_line(tmp_path: Path, vllm_child: VllmChild) -> None:
    """The flags exist in the installed vLLM and mean what the client means by them."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vLLM installed")
    profile = LoadProfile(rate=4.0, concurrency=8, seed=5)
    argv = bench_argv(
        "http://h:1", "m", "/t", profile, tmp_path / "d.jsonl", tmp_path / "r.json", 9
    )
    closed = bench_argv(
        "http://h:1", "m", "/t", LoadProfile(concurrency=1), tmp_path, tmp_path / "r", 1
    )
    args, closed_args = parsed_by_vllm(vllm_child, argv, closed)
    assert (args["backend"], args["dataset_name"], args["custom_output_len"]) == (
        "openai", "custom", -1,
    )  # fmt: skip
    assert (args["request_rate"], args["max_concurrency"], args["num_prompts"]) == ("4.0", 8, 9)
    assert args["ignore_eos"] and args["save_detailed"] and args["disable_shuffle"]
    assert args["skip_chat_template"] and args["temperature"] == "0.0"
    assert args["burstiness"] == "1.0" and args["ready_check_timeout_sec"] == 0
    assert args["seed"] == 5
    assert Path(args["result_dir"], args["result_filename"]) == tmp_path / "r.json"
    assert closed_args["request_rate"] == "inf"


def test_dataset_rows_are_the_requests_in_order(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    write_dataset(path, [RequestSpec("a b", 3), RequestSpec("c", 9)])
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [{"prompt": "a b", "output_tokens": 3}, {"prompt": "c", "output_tokens": 9}]
    with pytest.raises(VllmBenchError, match="text prompts"):
        write_dataset(path, [RequestSpec([1, 2], 3)])


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("random:prompt_format=ids", "sends text prompts"),
        ("shared-prefix:prompt_format=ids", "sends text prompts"),
        ("trace:path=t.jsonl", "cannot replay a trace"),
    ],
)
def test_workloads_it_cannot_send_are_refused(workload: str, message: str) -> None:
    with pytest.raises(VllmBenchError, match=message):
        check_workload(parse_workload(workload))


def test_workloads_it_can_send_pass() -> None:
    for workload in ("random", "shared-prefix", "jsonl:path=x.jsonl"):
        check_workload(parse_workload(workload))


def client(**kwargs: object) -> VllmBenchClient:
    return VllmBenchClient("http://127.0.0.1:9/v1", "m", "/tok", command=FAKE, **kwargs)  # type: ignore[arg-type]


REQUESTS = [RequestSpec("one two", 4), RequestSpec("three", 2), RequestSpec("four five", 6)]


def test_the_client_turns_vllms_result_into_records_in_order() -> None:
    calls: list[str] = []
    records = asyncio.run(
        client().run(
            REQUESTS, LoadProfile(concurrency=2), before_measured=lambda: calls.append("x")
        )
    )
    assert calls == ["x"]
    assert [r.output_tokens for r in records] == [4, 2, 6]
    assert [len(r.token_times) for r in records] == [4, 2, 6]
    first = records[0]
    assert first.send_time == 100.0 and first.ttft == pytest.approx(0.010)
    assert first.itl == pytest.approx((0.002,) * 3) and first.end_time == first.token_times[-1]


def test_a_failing_vllm_bench_is_one_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_BENCH", "fail")
    with pytest.raises(VllmBenchError, match=r"exited with 1: .*Initial test run failed"):
        asyncio.run(client().run(REQUESTS, LoadProfile(concurrency=2)))


@pytest.mark.parametrize("kind", ["engine", "hang"])
def test_the_guard_stops_vllm_bench_and_leaves_no_process(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead engine, or no output for hang_s while it measures: the run stops within a few
    guard intervals, every request is errored, and vLLM's client is gone."""
    pid_file = tmp_path / "pid"
    monkeypatch.setenv("FAKE_VLLM_BENCH", "silent")
    monkeypatch.setenv("FAKE_VLLM_BENCH_PID", str(pid_file))
    started = time.monotonic()

    def probe() -> str | None:
        return "engine exited" if kind == "engine" and pid_file.exists() else None

    guard = Guard(probe=probe, hang_s=1.0 if kind == "hang" else None, interval_s=0.1)
    with pytest.raises(BenchmarkAborted) as caught:
        asyncio.run(client().run(REQUESTS, LoadProfile(concurrency=2), guard=guard))
    assert caught.value.abort.kind == (AbortKind.ENGINE if kind == "engine" else AbortKind.HANG)
    assert time.monotonic() - started < 150  # the guard, not the 300 s request timeout
    assert len(caught.value.records) == 3 and not any(r.ok for r in caught.value.records)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        assert not psutil.pid_exists(pid), "vllm bench serve outlived the abort"
