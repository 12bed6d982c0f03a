"""The real study every real-engine test module that only reads it shares (run once per session),
and what several real-engine modules share: the engine environment, the OOM probe."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import built_once

REPO = Path(__file__).resolve().parents[2]
AUTOTUNE = [sys.executable, "-m", "autotune"]
TRIALS = 4
PROMPTS = 32


@pytest.fixture(scope="session")
def study_root(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """The README's main job, `scripts/demo.sh`, on the real engine with a smaller workload
    (4 trials of 32 prompts, no confirm step): study `e2e` under the returned root, its SLOs
    relative to the baseline, its best config exported to `e2e/best.yaml`. Built once
    (`support.built_once`): under scripts/test.sh by the engine run's
    tests/e2e/test_real_study.py, beside the other engine tests, and read by the last run's
    (one at a time) without a second study."""

    def build(root: Path) -> None:
        env = {
            **os.environ,
            "AUTOTUNE": " ".join(AUTOTUNE),
            "STUDY": "e2e",
            "TRIALS": str(TRIALS),
            "CONFIRM": "0",
            "MODEL": str(tiny_model),
            "ROOT": str(root),
            "SPACE": "cpu-quick",
            "WORKLOAD": f"random:input=128,output=32,prompts={PROMPTS}",
            "CONCURRENCY": "8",
            "SEED": "1",
            # One batch a trial: the suite's time; the sized runs' real-engine proof is
            # tests/e2e/test_real_sized.py.
            "PRECISION": "off",
            # SLOs the defaults hold (the demo's own ask for a TPOT the defaults miss, and 4
            # trials of a small space may find none): the tests that read this study read a
            # front of feasible configs.
            "SLOS": "p90_ttft_ms=baseline*1.2 p90_tpot_ms=baseline*1.2",
        }
        argv = ["bash", str(REPO / "scripts" / "demo.sh")]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=1200, cwd=REPO, env=env)
        (root / "tune.out").write_text(out.stdout + out.stderr)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert (root / "e2e" / "best.yaml").is_file() and "Pareto front" in out.stdout

    return built_once(tmp_path_factory, "studies", build)


def engine_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        # scripts/test.sh's one cache for every real engine of its runs, else the test's own.
        VLLM_CACHE_ROOT=os.environ.get("VLLM_CACHE_ROOT") or str(tmp / "cache"),
        TMPDIR=str(tmp),
    )
    return env


KV_OOM_MIB = 6400  # under an 8 GiB address-space limit this KV cache cannot be allocated
LIMITED = "prlimit --as=8589934592 {python} -m vllm.entrypoints.openai.api_server"

SPACE = f"""\
name: oom-probe
platform: cpu
fixed: {{enforce_eager: true}}
parameters:
  - {{name: kv_cache_mib, type: int, option: kv_cache_memory_bytes, scale: 1048576,
     low: 256, high: {2 * KV_OOM_MIB - 256}, step: {KV_OOM_MIB - 256}, baseline: 256}}
"""
# Optuna's RandomSampler with seed 0 proposes, after the baseline (256), 6400 then 12544: the
# first runs out of memory for real, the second must then never be launched.


def vllm_reads(config: Path, tmp: Path, shown: str) -> list[str]:
    """The words `shown` (a Python expression of `a`, the parsed args) prints once vLLM's own
    `--config` parser has read `config`, in a process of its own (vLLM's import stays out of
    the test's)."""
    code = (
        "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser;"
        "from vllm.entrypoints.launchers.cli_args import make_arg_parser;"
        "a = make_arg_parser(FlexibleArgumentParser()).parse_args(['--config', sys.argv[1]]);"
        f"print({shown})"
    )
    parsed = subprocess.run(
        [sys.executable, "-c", code, str(config)],
        capture_output=True, text=True, timeout=300, env=engine_env(tmp),
    )  # fmt: skip
    assert parsed.returncode == 0, parsed.stderr[-2000:]
    return parsed.stdout.split()


def psm_segments() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("psm_*")}


def _mapped_segments() -> set[str]:
    """The psm_* segments some live process maps (an engine holds its segments mapped)."""
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:  # the process ended, or is not ours to read
            continue
        mapped.update(w.rsplit("/", 1)[1] for w in text.split() if "/psm_" in w)
    return mapped


def orphan_segments(before: set[str], wait_s: float = 10.0) -> set[str]:
    """The psm_* segments made since `before` that no live process maps: what a dead engine
    left in /dev/shm. The engine tests run two at a time (scripts/test.sh), so a segment made
    since `before` may be another test's live engine's, mapped by it; one being created or
    removed is briefly unmapped, so an orphan counts only if it stays one for `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        orphans = psm_segments() - before - _mapped_segments()
        if not orphans or time.monotonic() > deadline:
            return orphans
        time.sleep(0.5)
