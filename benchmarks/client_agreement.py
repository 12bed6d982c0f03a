"""Do the two load clients agree? autotune's own client vs `vllm bench serve`, one server.

Each round runs `autotune bench` twice on one running server, once with `--load-client autotune`
and once with `--load-client vllm-bench`, on the same requests (the workload with seed = the
round); rounds alternate their order (A B, B A, ...) after one unmeasured round, so that drift
favours neither client. Reports every run, the medians over rounds and the ratio of medians
(autotune / vLLM) of p50 TTFT, p50 TPOT and output tok/s, and of each run's mean TTFT and TPOT
over the engine's own (`engine_mean_ttft_ms`, `engine_mean_tpot_ms`, from /metrics): on a small
host the engine's speed moves from one run to the next, and the engine's clock moves with it, so
the client / engine ratios compare the clients where the raw ones measure the host.

    python benchmarks/client_agreement.py --url http://127.0.0.1:8000 --model-path models/tiny
        [--rounds 6] [--concurrency 16] [--workload random:input=64,output=32,prompts=64,warmup=1]
        [--json F]
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

CLIENTS = ("autotune", "vllm-bench")
METRICS = {
    "p50 TTFT (ms)": lambda s: s["ttft_ms"]["p50"],
    "p50 TPOT (ms)": lambda s: s["tpot_ms"]["p50"],
    "output tok/s": lambda s: s["output_throughput"],
    "mean TTFT / engine's": lambda s: s["ttft_ms"]["mean"] / s["engine_mean_ttft_ms"],
    "mean TPOT / engine's": lambda s: s["tpot_ms"]["mean"] / s["engine_mean_tpot_ms"],
}


def run(args: argparse.Namespace, client: str, n: int, out: Path) -> dict[str, Any]:
    path = out / f"{client}-{n}.json"
    argv = [
        sys.executable, "-m", "autotune", "bench", "--url", args.url,
        "--model-path", str(args.model_path), "--concurrency", str(args.concurrency),
        "--workload", f"{args.workload},seed={n}", "--load-client", client, "--json", str(path),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{client} round {n} failed: {done.stderr.strip().splitlines()[-1:]}")
    summary: dict[str, Any] = json.loads(path.read_text())
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model-path", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds of each client")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workload", default="random:input=64,output=32,prompts=64,warmup=1")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CLIENTS}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.rounds + 1):
            order = CLIENTS if n == 0 or n % 2 == 1 else CLIENTS[::-1]  # A B, A B, B A, ...
            for client in order:
                summary = run(args, client, n, Path(tmp))
                if n:
                    runs[client].append(summary)
                    print(f"round {n} {client}: " + ", ".join(
                        f"{name} {get(summary):.3g}" for name, get in METRICS.items()
                    ))  # fmt: skip
    print("\n| | autotune | vllm bench serve | ratio |\n|---|---|---|---|")
    table = {}
    for name, get in METRICS.items():
        a = statistics.median(get(s) for s in runs["autotune"])
        b = statistics.median(get(s) for s in runs["vllm-bench"])
        table[name] = {"autotune": a, "vllm-bench": b, "ratio": a / b}
        print(f"| median {name} | {a:,.3g} | {b:,.3g} | {a / b:.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"table": table, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
