"""A stand-in for `vllm bench serve` (tests of bench/_vllm_bench.py): reads the custom dataset
the client wrote and writes a detailed result of vLLM's shape, without a server.

FAKE_VLLM_BENCH selects what it does: `ok` (default; every request 4 tokens, 10 ms TTFT, 2 ms
gaps), `silent` (says it measures, then says nothing for an hour), `fail` (exits 1 with an
error line). FAKE_VLLM_BENCH_PID, when set, names a file it writes its pid to.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset-path", required=True)
    parser.add_argument("--result-dir", required=True)
    parser.add_argument("--result-filename", required=True)
    parser.add_argument("--num-prompts", type=int, required=True)
    args, _ = parser.parse_known_args()
    if pid_file := os.environ.get("FAKE_VLLM_BENCH_PID"):
        Path(pid_file).write_text(str(os.getpid()))
    mode = os.environ.get("FAKE_VLLM_BENCH", "ok")
    print("Starting main benchmark run...", flush=True)
    if mode == "fail":
        print("ValueError: Initial test run failed", flush=True)
        sys.exit(1)
    if mode == "silent":
        time.sleep(3600)
    rows = [json.loads(line) for line in Path(args.dataset_path).read_text().splitlines()]
    assert len(rows) == args.num_prompts
    n = len(rows)
    result = {
        "start_times": [100.0 + i for i in range(n)],
        "ttfts": [0.010] * n,
        "itls": [[0.002] * (row["output_tokens"] - 1) for row in rows],
        "latencies": [0.010 + 0.002 * (row["output_tokens"] - 1) for row in rows],
        "input_lens": [len(row["prompt"].split()) for row in rows],
        "output_lens": [row["output_tokens"] for row in rows],
        "errors": [""] * n,
    }
    Path(args.result_dir, args.result_filename).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
