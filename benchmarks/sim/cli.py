"""One study through the real CLI on the simulated engine, scored by the truth.

`run_cli` runs `autotune tune` as a user would: a subprocess, `--engine-command` launching
`benchmarks/sim/server.py` (a `vllm serve` stand-in serving the landscape's scheduler in real
time, `SIM_TIME_SCALE` of wall time per simulated second), the tuner's own load client sending
the landscape's workload over HTTP, the tuner's trial folders, store and gate, on a simulated
GPU host (`tests/sim_devices.py`: a stand-in `nvidia-smi` first on PATH reporting the
landscape's GPUs). Then `autotune export` writes the config it would deploy. Nothing of the
tuner is replaced; what differs from `tuning.run_method` (the same study loop in-process, the
device work computed by `simulate`) is that the measurements are real timings of a real
server on this host, with its client, its scheduling jitter and its CPU beside the server.

The time scale applies to what is measured: a latency in wall milliseconds is the simulated
one times the scale, a throughput the simulated one over it. So SLO bounds are passed scaled
(p99 TPOT 60 ms at scale 0.1 is 6 ms), and a scale too small for the host shows as measured
values that no longer follow the truth: `rank_correlation` of the landscape's metric, measured
and simulated, over the study's trials says how well they did.

After the study, the store's records (the same the CLI reads) are replayed in launch order:
after each launched trial, the config `choose_export` would deploy then is scored by the truth,
as in-process. Device seconds are `tuning.STARTUP_S` + the benchmark simulated at the truth's
speed (in-process, `SimMeasure` counts a drifted run's longer benchmark), so the two
variants' tables compare; the wall time is reported beside them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from scipy.stats import spearmanr

from autotune.answer.export import choose_export
from autotune.answer.selection import SelectionError
from autotune.space import load_space
from autotune.store import StudyFacts, StudyStore, TrialRecord
from autotune.vocab.status import PREDICTED_STATUSES, TrialStatus

from .landscapes import Landscape
from .truth import Truth
from .tuning import FAILED_STARTUP_S, STARTUP_S, Method, Step, model_folder

REPO = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).resolve().with_name("server.py")
MIB = 2**20
NOT_LAUNCHED = PREDICTED_STATUSES | {TrialStatus.DUPLICATE, TrialStatus.UNUSED}
EXIT_OK, EXIT_INFEASIBLE = 0, 3  # README.md, Exit codes: 3 = no config meets the constraints
COMPUTE_CAP = {"H100": "9.0", "A100": "8.0"}


@dataclass(frozen=True)
class CliRun:
    """What one CLI study gave: the progression, the exported config's truth, and the
    landscape's metric of each measured trial, measured and simulated (`scored`)."""

    steps: list[Step]
    exported_truth: float
    measured: list[float]
    simulated: list[float]
    wall_s: float


def workload_flags(landscape: Landscape, scale: float, folder: Path) -> list[str]:
    """The landscape's own requests as a trace the tuner replays: each row's prompt and output
    lengths, sent as token ids (the simulated engine counts them exactly), at the landscape's
    arrival times (all at 0 for a closed loop, which `--concurrency` then caps) replayed
    1/scale times faster, so that the measured requests are the ones the truth simulates."""
    work = landscape.workload
    trace = folder / f"{landscape.name}.trace.jsonl"
    rows = zip(work.offsets(), work.lengths, strict=True)
    trace.write_text(
        "".join(
            json.dumps({"timestamp_s": at, "input_length": i, "output_length": o}) + "\n"
            for at, (i, o) in rows
        )
    )
    spec = f"trace:path={trace},rate_scale={1 / scale:g},prompt_format=ids"
    flags = ["--workload", spec]
    if work.concurrency is not None:
        flags += ["--concurrency", str(work.concurrency)]
    return flags


def objective_flags(landscape: Landscape, scale: float) -> list[str]:
    flags = ["--objective", f"{landscape.metric}:max"]
    if landscape.metric == "output_throughput":
        flags += ["--objective", "p99_ttft_ms:min", "--objective", "p99_tpot_ms:min"]
    for metric, bound in landscape.slos.items():
        flags += ["--slo", f"{metric}={bound * scale:g}"]
    return flags


def install_host(landscape: Landscape, folder: Path) -> dict[str, str]:
    """The landscape's GPUs as a simulated host; the environment that puts its nvidia-smi
    first on PATH."""
    if str(REPO / "tests") not in sys.path:
        sys.path.insert(0, str(REPO / "tests"))
    from sim_devices import Host, install  # a test helper, on the path now

    gpu = landscape.hardware.gpu
    cap = next((v for k, v in COMPUTE_CAP.items() if k in gpu.name), "9.0")
    host = Host("cuda", landscape.hardware.gpus, gpu.total_bytes // MIB, 512, name=gpu.name,
                compute_cap=cap)  # fmt: skip
    bin_dir = install(folder, host)
    return {"SIM_DEVICES": str(folder), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def run_cli(
    landscape: Landscape,
    method: Method,
    seed: int,
    trials: int,
    truth: Truth,
    root: Path,
    *,
    scale: float = 0.1,
    chunk_tokens: int = 16,
    noise: float = 0.0,
    drift: float = 0.0,
    drift_period_s: float = 3600.0,
    precision: str | None = None,
    profile: str | None = None,
) -> CliRun:
    """One `autotune tune` + `autotune export` of `method` on the simulated engine, each
    trial measured to `precision` (`tune --precision`; None: the tuner's default), on a host
    of noise `profile` (`noise.PROFILES`; None: the uniform `noise` and the drift)."""
    root.mkdir(parents=True, exist_ok=True)
    study = f"{landscape.name}-{method.name}-{seed}"
    env = {
        **os.environ,
        **install_host(landscape, root / "host"),
        "SIM_LANDSCAPE": landscape.name,
        "SIM_TIME_SCALE": str(scale),
        "SIM_CHUNK_TOKENS": str(chunk_tokens),
        "SIM_NOISE": str(noise),
        "SIM_DRIFT": str(drift),
        # The drift's period is in wall time: scaled like the benchmarks it slows.
        "SIM_DRIFT_PERIOD_S": str(drift_period_s * scale),
        "SIM_DRIFT_T0": str(time.time()),
        # A profile's windows and device offsets are the study's, as in-process (`run_method`).
        "SIM_NOISE_PROFILE": profile or "",
        "SIM_NOISE_SEED": str(seed * 7919 + 1),
    }
    env.pop("SIM_SEED", None)  # each start draws its own level, as a real host does
    cli = [sys.executable, "-m", "autotune"]
    tune = [
        *cli, "tune", "--study", study, "--root", str(root),
        "--model", str(model_folder(landscape, root)), "--space", str(landscape.space),
        "--engine-command", f"{sys.executable} {SERVER}",
        "--trials", str(trials), "--seed", str(seed),
        *workload_flags(landscape, scale, root), *objective_flags(landscape, scale),
        *_method_flags(method.fields),
        *(["--precision", precision] if precision else []),
    ]  # fmt: skip
    started = time.monotonic()
    _run(tune, env, root / f"{study}.tune.log")
    wall_s = time.monotonic() - started
    out = root / f"{study}.export.yaml"
    export = [*cli, "export", study, "--root", str(root), "-o", str(out)]
    exported_truth = 0.0  # nothing to deploy when no config met the constraints
    if _run(export, env, root / f"{study}.export.log"):
        exported_truth = truth.score(_options(yaml.safe_load(out.read_text())))
    store = StudyStore(f"sqlite:///{root / study / 'study.db'}")
    records = store.trials(study)
    steps = replay(records, store.study_facts(study), landscape, truth)
    measured, simulated = scored(records, landscape, truth)
    return CliRun(steps, exported_truth, measured, simulated, wall_s)


def _method_flags(fields: dict[str, Any]) -> list[str]:
    return [x for k, v in fields.items() for x in (f"--{k}", str(v))]


def _run(cmd: list[str], env: dict[str, str], log: Path) -> bool:
    """True when it exited 0; False on EXIT_INFEASIBLE (no config met the constraints: the
    study ran, there is nothing to deploy); raises on any other exit."""
    with log.open("w") as out:
        rc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO).returncode
    if rc not in (EXIT_OK, EXIT_INFEASIBLE):
        tail = "".join(log.read_text().splitlines(keepends=True)[-20:])
        raise RuntimeError(f"{' '.join(cmd[2:4])} exited {rc}; see {log}:\n{tail}")
    return rc == EXIT_OK


def _options(exported: dict[str, Any]) -> dict[str, Any]:
    """The engine options of an exported YAML (dashes, as `vllm serve --config` reads them)."""
    return {k.replace("-", "_"): v for k, v in exported.items() if k != "model"}


def launched(record: TrialRecord) -> bool:
    """A trial that started an engine (the gate's predictions and skips did not)."""
    return record.status not in NOT_LAUNCHED and bool(record.device_s)


def replay(
    records: list[TrialRecord], facts: StudyFacts, landscape: Landscape, truth: Truth
) -> list[Step]:
    """After each launched trial, in order, the truth of what export would deploy then."""
    space = load_space(landscape.space)
    ordered = sorted(records, key=lambda r: r.number)
    steps, device_s = [], 0.0
    for k, record in enumerate(ordered):
        if not launched(record):
            continue
        result = truth.result(record.config)
        device_s += STARTUP_S + result.duration_s if result.ok else FAILED_STARTUP_S
        try:
            chosen, _ = choose_export(ordered[: k + 1], facts)
            options = space.to_engine(chosen.params)[0]
            score, misses, past = truth.score(options), truth.misses(options), truth.past(options)
        except SelectionError:
            score, misses, past = 0.0, False, 0.0
        steps.append(Step(device_s, score, misses, past))
    return steps


def scored(
    records: list[TrialRecord], landscape: Landscape, truth: Truth
) -> tuple[list[float], list[float]]:
    """Per measured trial, the landscape's metric as the tuner measured it (wall time) and as
    the truth scores it (simulated time; goodput counts only requests within the SLOs)."""
    measured, simulated = [], []
    for record in records:
        value = record.metrics.get(landscape.metric)
        if record.status == TrialStatus.OK and value is not None:
            measured.append(value)
            simulated.append(landscape.score(truth.result(record.config)))
    return measured, simulated


def rank_correlation(a: list[float], b: list[float]) -> float | None:
    """Spearman's rho (ties by average rank); None under three points or without spread."""
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return float(spearmanr(a, b).statistic)
