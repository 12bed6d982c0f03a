"""The load client against tests/fake_engine.py running as a real server process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from autotune.bench import LoadProfile, RequestSpec, run_benchmark, summarize
from autotune.engine import free_port

FAKE_ENGINE = Path(__file__).resolve().parents[1] / "fake_engine.py"


def wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"fake engine exited with {process.returncode}: {log.read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    pytest.fail(f"fake engine not healthy in time: {log.read_text()}")


def test_benchmark_against_fake_engine(tmp_path: Path) -> None:
    config = tmp_path / "engine.yaml"
    config.write_text("model: tiny\nmax-num-seqs: 2\n")
    port, log = free_port(), tmp_path / "engine.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                str(FAKE_ENGINE),
                "--config",
                str(config),
                "--port",
                str(port),
                "--host",
                "127.0.0.1",
                "--unknown-flag",
                "1",
            ],
            stderr=err,
            start_new_session=True,
            env={**os.environ, "FAKE_ENGINE_STARTUP_S": "0.1"},
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, process, log)
        assert httpx.get(f"{url}/version").json() == {"version": "0.0-fake"}
        requests = [RequestSpec([5, 6, 7, 8], 6) for _ in range(8)]
        records = run_benchmark(url, "tiny", requests[:2], requests, LoadProfile(concurrency=4))
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert len(records) == 8
    assert all(record.ok for record in records), [record.error for record in records]
    assert all(record.output_tokens == 6 and record.prompt_tokens == 4 for record in records)
    assert all(len(record.token_times) == 6 for record in records)
    assert summarize(records).output_throughput > 0
    text = log.read_text()
    assert "Maximum concurrency for 1,024 tokens per request: 64.00x" in text
    assert f"Starting vLLM server on http://127.0.0.1:{port}" in text


def test_fake_engine_oom(tmp_path: Path) -> None:
    env = {**os.environ, "FAKE_ENGINE_STARTUP_S": "0", "FAKE_ENGINE_FAIL": "oom"}
    result = subprocess.run(
        [sys.executable, str(FAKE_ENGINE), "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert result.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory" in result.stderr
