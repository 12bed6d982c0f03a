"""Bad input, tried as a new user would: the `autotune` command's own entry point, in this
process for most rows and as a real `python -m autotune` process for the rows marked `process`
(one of each kind of failure: an unknown name, an unreachable database, an environment
variable, a failing server, a usage error, a heavy import), which is where a stray warning or
log line of a fresh interpreter would show.

Each row must end with its exit code (2 for bad input) and exactly one `error:` line on stderr
that names the offending flag or field, in plain words (no traceback, no pydantic wording), and
must leave everything it could touch byte for byte as it was: the existing study's database and
trial folders, the input files, a foreign SQLite file, a real model's weights; no new study
appears. One study is tuned per module (fake engine) and the whole workspace copied per row.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from support import Ran, built_once, run_in_process

FAKE_ENGINE = Path(__file__).resolve().parents[1] / "fake_engine.py"
ENGINE = f"{{python}} {FAKE_ENGINE}"
WORKLOAD = "random:input=32,output=8,prompts=8,warmup=1"
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "FAKE_ENGINE_STARTUP_S": "0.1",
    "PYTHONUNBUFFERED": "1",
}
# Words of pydantic's messages and of Python's error reports that a user must never see.
FORBIDDEN = (
    "Traceback",
    "Input should be",
    "validation error",
    "Extra inputs are not permitted",
    "String should",
    "Field required",
    "pydantic",
    "errors.pydantic.dev",
)

LONG = "n" * 256  # a name longer than any file system holds (255 bytes)
# A valid `tune` of a new study, before the row's bad part (a later flag wins).
TUNE = [
    "tune", "--study", "fresh", "--model", "{model}", "--space", "cpu-quick",
    "--workload", WORKLOAD, "--rate", "100", "--root", "studies", "--engine-command", ENGINE,
]  # fmt: skip


@dataclass(frozen=True)
class Row:
    argv: list[str]
    names: str  # the flag or field the error line must name
    code: int = 2
    env: dict[str, str] = field(default_factory=dict)
    process: bool = False  # run as a real `python -m autotune` process


def tune(*more: str) -> list[str]:
    return [*TUNE, *more]


def row(
    case_id: str, argv: list[str], names: str, *marks: pytest.MarkDecorator, **kw: object
) -> object:
    return pytest.param(Row(argv, names, **kw), id=case_id, marks=marks)  # type: ignore[arg-type]


# Issue 14 found `--warm-start NOSUCH` and `--slo p99_ttft_ms=-5` creating the study before
# they were refused, so that the corrected command was then refused as another experiment.
ROWS = [
    # tune: what it searches, how it loads, what it optimizes
    row("tune-space-unknown", tune("--space", "nosuch"), "nosuch", process=True),
    row("tune-space-malformed", tune("--space", "files/bad.yaml"), "bad.yaml"),
    row("tune-space-unknown-param", tune("--space", "files/unknown.yaml"), "max_num_seq"),
    row("tune-workload-bogus", tune("--workload", "bogus"), "--workload"),
    row("tune-workload-key", tune("--workload", "random:inptu=3"), "inptu"),
    row("tune-rate-0", tune("--rate", "0"), "--rate"),
    row("tune-rate-text", tune("--rate", "fast"), "--rate"),
    row("tune-concurrency-0", tune("--concurrency", "0"), "--concurrency"),
    row("tune-slo-unknown-metric", tune("--slo", "p99_ttf_ms=5"), "p99_ttf_ms"),
    row("tune-slo-negative", tune("--slo", "p99_ttft_ms=-5"), "p99_ttft_ms"),
    row("tune-slo-no-equals", tune("--slo", "p99_ttft_ms"), "--slo"),
    row("tune-slo-baseline-0", tune("--slo", "p99_tpot_ms=baseline*0"), "p99_tpot_ms"),
    row("tune-slo-baseline-x", tune("--slo", "p99_tpot_ms=baseline*x"), "p99_tpot_ms"),
    row("tune-objective-form", tune("--objective", "fast"), "--objective"),
    row("tune-objective-metric", tune("--objective", "speed:max"), "--objective"),
    row("tune-trials-0", tune("--trials", "0"), "--trials"),
    row("tune-parallel-x", tune("--parallel", "x"), "--parallel"),
    row("tune-option-no-equals", tune("--option", "max_model_len"), "--option"),
    row(
        "tune-option-misspelt", tune("--option", "max_modl_len=64"), "did you mean 'max_model_len'"
    ),
    row("tune-load-bogus", tune("--load", "bogus"), "--load"),
    row("tune-scenario-bogus", tune("--scenario", "bogus"), "--scenario"),
    row("tune-sampler-bogus", tune("--sampler", "bogus"), "--sampler"),
    row("tune-search-bogus", tune("--search", "bogus"), "--search"),
    row("tune-remeasure-bogus", tune("--remeasure", "sometimes"), "--remeasure"),
    row("tune-speed-probe-removed", tune("--speed-probe", "on"), "--speed-probe"),
    row("tune-load-client-bogus", tune("--load-client", "curl"), "--load-client 'curl'"),
    row(
        "tune-vllm-bench-ids",
        tune("--load-client", "vllm-bench", "--workload", "random:prompt_format=ids"),
        "vllm-bench sends text prompts",
    ),
    row(
        "tune-vllm-bench-prune",
        tune("--load-client", "vllm-bench", "--prune"),
        "--prune needs each request as it ends",
    ),
    row("tune-study-bad-name", tune("--study", "bad/name"), "--study"),
    row("tune-option-typo", tune("--trails", "3"), "--trails (did you mean '--trials'?)"),
    # tune: where it runs and stores, what it starts from
    row("tune-model-missing", tune("--model", "/nonexistent/model"), "/nonexistent/model"),
    row(
        "tune-storage-unreachable",
        tune("--storage", "postgresql+psycopg://u@127.0.0.1:9/x"),
        "storage",
        process=True,
    ),
    row("tune-storage-nonsense", tune("--storage", "nonsense"), "storage"),
    row("tune-root-is-a-file", tune("--root", "files/neg.yaml"), "--root files/neg.yaml"),
    row("tune-storage-foreign", tune("--storage", "sqlite:///files/foreign.db"), "foreign.db"),
    row("tune-warm-start-missing", tune("--warm-start", "NOSUCH"), "NOSUCH"),
    row("tune-baseline-missing", tune("--baseline", "files/nosuch.sh"), "--baseline"),
    row("tune-spec-missing", ["tune", "--spec", "files/nosuch.yaml"], "nosuch.yaml"),
    row("tune-spec-yaml", ["tune", "--spec", "files/badspec.yaml"], "badspec.yaml"),
    row(
        "tune-spec-unknown-field",
        ["tune", "--spec", "files/trails.yaml"],
        "trails: unknown field (did you mean 'trials'?)",
    ),
    row("tune-spec-bad-value", ["tune", "--spec", "files/rate0.yaml"], "load.rate"),
    row(
        "heartbeat-env",
        ["show", "s1", "--root", "studies"],
        "AUTOTUNE_HEARTBEAT_S",
        env={"AUTOTUNE_HEARTBEAT_S": "abc"},
        process=True,
    ),
    # the commands that read or join a study
    row(
        "worker-no-such-study",
        ["worker", "--study", "nosuch", "--storage", "sqlite:///studies/s1/study.db"],
        "nosuch",
    ),
    row("confirm-top-0", ["confirm", "s1", "--top", "0", "--root", "studies"], "--top"),
    row("confirm-no-such-study", ["confirm", "nosuch", "--root", "studies"], "nosuch"),
    row("show-no-such-study", ["show", "nosuch", "--root", "studies"], "nosuch"),
    row(
        "show-foreign-sqlite", ["show", "s1", "--storage", "sqlite:///files/foreign.db"], "foreign"
    ),
    row(
        "show-corrupt-sqlite",
        ["show", "s1", "--storage", "sqlite:///files/corrupt.db"],
        "corrupt",
        process=True,
    ),
    row("show-missing-argument", ["show"], "study"),
    row(
        "export-no-such-study", ["export", "nosuch", "--root", "studies", "-o", "x.yaml"], "nosuch"
    ),
    row("export-into-a-folder", ["export", "s1", "--root", "studies", "-o", "files"], "-o files"),
    row("export-no-such-trial", ["export", "s1", "--root", "studies", "--trial", "999"], "999"),
    row("export-pick-bogus", ["export", "s1", "--root", "studies", "--pick", "bogus"], "bogus"),
    row("profile-no-such-trial", ["profile", "s1", "--root", "studies", "--trial", "999"], "999"),
    row("report-into-a-folder", ["report", "s1", "--root", "studies", "-o", "files"], "-o files"),
    # bench
    row(
        "bench-url-no-scheme",
        ["bench", "--url", "127.0.0.1:9", "--workload", "random", "--concurrency", "1"],
        "--url",
    ),
    row(
        "bench-vllm-bench-ids",
        [
            *("bench", "--url", "http://127.0.0.1:9", "--concurrency", "1"),
            *("--workload", "random:prompt_format=ids", "--load-client", "vllm-bench"),
        ],
        "vllm-bench sends text prompts",
    ),
    row(
        "bench-unreachable",
        ["bench", "--url", "http://127.0.0.1:9", "--workload", "random", "--concurrency", "1"],
        "127.0.0.1:9",
    ),
    row(
        "bench-server-500",
        [
            "bench",
            "--url",
            "http://127.0.0.1:{port500}",
            "--model",
            "m",
            "--model-path",
            "{model}",
            "--workload",
            "random:prompts=3",
            "--concurrency",
            "2",
        ],
        "HTTP 500",
        code=1,
        process=True,
    ),
    # dashboard
    row("dashboard-port-negative", ["dashboard", "--port", "-1", "--root", "studies"], "--port"),
    row(
        "dashboard-host-from-env",
        ["dashboard", "--port", "0", "--root", "studies"],
        "--host",
        env={"AUTOTUNE_DASHBOARD_HOST": "0.0.0.0"},
        process=True,
    ),
    # spaces
    row("spaces-negative-low", ["spaces", "validate", "files/neg.yaml"], "parameters[0].low"),
    row("spaces-fraction-high", ["spaces", "validate", "files/gmu.yaml"], "parameters[0].high"),
    row("spaces-low-above-high", ["spaces", "validate", "files/lowhigh.yaml"], "low"),
    row("spaces-unknown-param", ["spaces", "validate", "files/unknown.yaml"], "max_num_seq"),
    row("spaces-unknown-kind", ["spaces", "validate", "files/kind.yaml"], "integer"),
    # make-tiny-model, devices, the command itself
    row(
        "tiny-model-over-a-real-model",
        ["make-tiny-model", "files/real-model"],
        "real-model",
        process=True,
    ),
    row("devices-bad-list", ["devices", "--devices", "x"], "--devices"),
    row("command-typo", ["tnue"], "'tnue' (did you mean 'tune'?)", process=True),
    # Issue 45, by class: numbers bounded, floats finite, paths checked, files read bounded,
    # look-alike values refused, and the messages say the truth; wherever each enters.
    row("tune-seed-2**32", tune("--seed", "4294967296"), "--seed 4294967296"),
    row("tune-prompts-huge", tune("--workload", "random:prompts=99999999999"), "'prompts'"),
    row("tune-slo-factor-inf", tune("--slo", "p99_ttft_ms=baseline*inf"), "--slo 'p99_ttft"),
    row("tune-root-name-long", tune("--root", LONG), "--root"),
    row("tune-root-under-a-file", tune("--root", "files/neg.yaml/x"), "neg.yaml is a file"),
    row("tune-spec-device", ["tune", "--spec", "/dev/zero"], "/dev/zero"),
    row("tune-spec-huge", ["tune", "--spec", "files/big.yaml"], "larger than 1 MiB"),
    row("tune-offline-engine-command", tune("--scenario", "offline"), "--engine-command"),
    row("spaces-bound-inf", ["spaces", "validate", "files/inf.yaml"], "expected a finite"),
    row("spaces-choices-alike", ["spaces", "validate", "files/alike.yaml"], "are one value"),
    row("spaces-device", ["spaces", "validate", "/dev/zero"], "/dev/zero: not a file"),
    row("show-root-name-long", ["show", "s1", "--root", LONG], "--root"),
    row("show-study-name-long", ["show", LONG, "--root", "studies"], "study"),
    row("logs-root-name-long", ["logs", "s1", "--root", LONG], "--root"),
    row("predict-root-name-long", ["predict", "s1", "--root", LONG], "--root"),
    row("confirm-root-name-long", ["confirm", "s1", "--root", LONG], "--root"),
    row("studies-root-name-long", ["studies", "--root", LONG], "--root"),
    row("profile-root-name-long", ["profile", "s1", "--root", LONG], "--root"),
    row("doctor-root-name-long", ["doctor", "--root", LONG], "--root"),
    row("dashboard-root-name-long", ["dashboard", "--root", LONG, "--port", "0"], "--root"),
    row("report-root-name-long", ["report", "s1", "--root", LONG], "--root"),
    row("report-output-name-long", ["report", "s1", "--root", "studies", "-o", LONG], "-o"),
    row(
        "worker-root-name-long",
        ["worker", "--study", "s1", "--storage", "sqlite:///studies/s1/study.db", "--root", LONG],
        "--root",
    ),
    row("size-root-name-long", ["size", "s1", "--rate", "1", "--root", LONG], "--root"),
    row("size-rate-inf", ["size", "s1", "--rate", "inf", "--root", "studies"], "--rate inf"),
    row("size-top-huge", ["size", "s1", "--rate", "1", "--top", "9" * 20], "--top 9999"),
    row("confirm-top-huge", ["confirm", "s1", "--top", "9" * 12, "--root", "studies"], "--top"),
    row("confirm-rounds-huge", ["confirm", "s1", "--rounds", "101"], "--rounds 101"),
    row(
        "predict-set-out-of-range",
        ["predict", "s1", "--root", "studies", "--set", "max_num_seqs=100000"],
        "100000 is not a value of max_num_seqs, which is a whole number from",
    ),
    row(
        "bench-concurrency-huge",
        ["bench", "--url", "http://127.0.0.1:9", "--workload", "random", "--concurrency", "9" * 12],
        "--concurrency 999999999999",
    ),
    row(
        "bench-rate-nan",
        ["bench", "--url", "http://127.0.0.1:9", "--workload", "random", "--rate", "nan"],
        "--rate nan",
    ),
    row(
        "bench-json-name-long",
        [
            *("bench", "--url", "http://127.0.0.1:9", "--workload", "random"),
            *("--concurrency", "1", "--json", LONG),
        ],
        "--json",
    ),
    row("tiny-model-seed-huge", ["make-tiny-model", "files/tm", "--seed", "9" * 20], "--seed"),
    row("tiny-model-name-long", ["make-tiny-model", LONG], "PATH"),
    # Issue 49: an engine command this host cannot run, and requests that contradict
    # themselves, refused before the study exists (tests/cli/test_hostile_input.py has a row
    # per class).
    row(
        "tune-engine-program-missing",
        tune("--engine-command", "nosuchprog --serve"),
        "nosuchprog: no such program on PATH",
        process=True,
    ),
    row("tune-engine-placeholder-typo", tune("--engine-command", "vllm {prot}"), "{prot}"),
    row("tune-slo-on-a-maximized", tune("--slo", "output_throughput=900"), "--slo output_thr"),
    row("tune-storage-in-memory", tune("--storage", "sqlite://"), "--storage sqlite://"),
    row(
        "heartbeat-env-inf",
        ["show", "s1", "--root", "studies"],
        "AUTOTUNE_HEARTBEAT_S='inf': expected at most 604,800 seconds",
        env={"AUTOTUNE_HEARTBEAT_S": "inf"},
    ),
]


BAD_FILES = {
    "bad.yaml": "name: bad\nparameters: [ {name: x, type: int\n",
    "neg.yaml": "parameters:\n  - {name: max_num_seqs, type: int, low: -8, high: 64,"
    " baseline: 8}\n",
    "gmu.yaml": "parameters:\n  - {name: gpu_memory_utilization, type: float, low: 0.5,"
    " high: 1.5, baseline: 0.9}\n",
    "lowhigh.yaml": "parameters:\n  - {name: max_num_seqs, type: int, low: 64, high: 8,"
    " baseline: 8}\n",
    "unknown.yaml": "parameters:\n  - {name: max_num_seq, type: int, low: 1, high: 8,"
    " baseline: 8}\n",
    "kind.yaml": "parameters:\n  - {name: max_num_seqs, type: integer, low: 1, high: 8,"
    " baseline: 8}\n",
    "badspec.yaml": "study: [unclosed\n",
    "trails.yaml": "study: t\nmodel: /nonexistent\ntrails: 3\n",
    "rate0.yaml": "study: t\nmodel: /nonexistent\nload: {rate: 0}\n",
    "corrupt.db": "this is not a database\n" * 200,
    "inf.yaml": "parameters:\n  - {name: x, env: VLLM_X, type: float, low: 0.5, high: .inf,"
    " baseline: 1}\n",
    "alike.yaml": "parameters:\n  - {name: enforce_eager, type: categorical,"
    " choices: [true, 'true'], baseline: true}\n",
}


def _write_files(folder: Path) -> None:
    folder.mkdir()
    for name, text in BAD_FILES.items():
        (folder / name).write_text(text)
    with (folder / "big.yaml").open("wb") as big:  # past every file's bound
        big.truncate(2 * 1024 * 1024)
    with sqlite3.connect(folder / "foreign.db") as conn:  # another application's data
        conn.execute("CREATE TABLE notes (id INTEGER, body TEXT)")
        conn.execute("INSERT INTO notes VALUES (1, 'keep me')")
    conn.close()
    real = folder / "real-model"  # a model this tool did not make: never overwritten
    real.mkdir()
    (real / "config.json").write_text('{"model_type": "llama", "hidden_size": 4096}\n')
    (real / "model.safetensors").write_bytes(os.urandom(4096))


def run_cli(
    cwd: Path, argv: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *argv],
        cwd=cwd,
        env={**os.environ, **ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def workspace(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the bad input files and one tuned study, `studies/s1`: built once for
    every worker of the run (`built_once`), each row working on a copy of it."""

    def build(base: Path) -> None:
        _write_files(base / "files")
        argv = [*TUNE, "--study", "s1", "--trials", "2", "--sampler", "random"]
        done = run_cli(base, [a.replace("{model}", str(tiny_model)) for a in argv])
        assert done.returncode == 0, done.stdout + done.stderr

    return built_once(tmp_path_factory, "bad-input-workspace", build)


class _Fails(http.server.BaseHTTPRequestHandler):
    """A server that answers every request with HTTP 500 (an HTML page, several lines)."""

    def _fail(self) -> None:
        body = b"<html>\n<body>Internal Server Error</body>\n</html>\n"
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _fail

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def port500() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Fails)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def snapshot(root: Path) -> dict[str, str]:
    """Every file's SHA-256 and every folder under `root`, by relative path."""
    return {
        str(path.relative_to(root)): (
            "folder" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        )
        for path in sorted(root.rglob("*"))
    }


@pytest.fixture
def copy(workspace: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ws"
    shutil.copytree(workspace, target)
    return target


@pytest.mark.parametrize("case", ROWS)
def test_bad_input_is_one_line_and_changes_nothing(
    case: Row,
    copy: Path,
    tiny_model: Path,
    port500: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        a.replace("{model}", str(tiny_model)).replace("{port500}", str(port500)) for a in case.argv
    ]
    before = snapshot(copy)
    if case.process:
        done: Ran | subprocess.CompletedProcess[str] = run_cli(copy, argv, case.env)
    else:
        done = run_in_process(argv, monkeypatch, capsys, cwd=copy, env={**ENV, **case.env})
    after = snapshot(copy)

    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    for word in FORBIDDEN:
        assert word not in done.stderr, line
    assert case.names in line, line
    assert done.returncode == case.code, line
    assert after == before, f"{line}\nchanged: {sorted(set(after.items()) ^ set(before.items()))}"


def test_dashboard_binds_an_address_given_explicitly_with_host(copy: Path) -> None:
    """`--host 0.0.0.0` typed on the command line is the user's explicit choice: it binds."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "autotune", "dashboard", "--host", "0.0.0.0"]
    proc = subprocess.Popen(
        [*argv, "--port", str(port), "--root", "studies"],
        cwd=copy,
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120  # bounds a hang: a busy host starts slowly
        answer = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert answer is not None, proc.stderr.read() if proc.poll() is not None else "no answer"
        assert answer.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    output = proc.stdout.read() if proc.stdout else ""
    assert re.search(rf"at http://0\.0\.0\.0:{port}/", output), output
