"""`autotune show`: `--format json` as a process (a fresh interpreter writes nothing else to
stdout), csv and the table, and the table at 80 columns."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console
from support import Ran

from autotune.answer.trial_data import COLUMNS
from autotune.bench import METRIC_NAMES
from autotune.cli._render import print_front
from autotune.store import StudyFacts, StudyStore, TrialRecord

if TYPE_CHECKING:
    from tests.cli.conftest import Tuned


def show(tuned: Tuned, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "autotune", "show", tuned.study, "--root", str(tuned.root), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def stored(tuned: Tuned) -> list[TrialRecord]:
    url = f"sqlite:///{tuned.root / tuned.study / 'study.db'}"
    return StudyStore(url, create=False).trials(tuned.study)


def test_show_json_is_every_trial_with_its_measurements(tuned: Tuned) -> None:
    rows = json.loads(show(tuned, "--format", "json"))
    records = stored(tuned)
    assert [r["number"] for r in rows] == [t.number for t in records] == [0, 1, 2]
    for row, t in zip(rows, records, strict=True):
        assert list(row)[: len(COLUMNS)] == list(COLUMNS)
        assert row["status"] == "ok" and row["failure_kind"] is None
        assert row["metrics"]["output_throughput"] == t.metric("output_throughput") > 0
        assert row["metrics"]["p99_ttft_ms"] == t.metric("p99_ttft_ms")
        assert row["metrics"]["completed"] == 8.0
        assert row["params"] == t.params and row["params"]["max_num_seqs"] > 0
        assert row["device_s"] == t.device_s and row["host"]
    assert rows[0]["role"] == "baseline"
    assert any(r["on_front"] for r in rows)


def test_show_csv_has_a_column_per_param_and_metric(
    tuned: Tuned, autotune_here: Callable[..., Ran]
) -> None:
    shown = autotune_here("show", tuned.study, "--root", tuned.root, "--format", "csv")
    assert shown.returncode == 0, shown.stderr
    rows = list(csv.DictReader(io.StringIO(shown.stdout)))
    records = stored(tuned)
    assert len(rows) == 3
    header = list(rows[0])
    assert header[: len(COLUMNS)] == list(COLUMNS)
    assert {f"metric.{m}" for m in (*METRIC_NAMES, "completed", "duration_s")} <= set(header)
    assert {f"param.{p}" for p in records[0].params} <= set(header)
    for row, t in zip(rows, records, strict=True):
        assert float(row["metric.output_throughput"]) == t.metric("output_throughput")
        assert int(row["param.max_num_seqs"]) == t.params["max_num_seqs"]
        assert row["feasible"] == "true" and row["failure_kind"] == ""


def test_show_table_is_the_default(tuned: Tuned, autotune_here: Callable[..., Ran]) -> None:
    for table in ((), ("--format", "table")):
        shown = autotune_here("show", tuned.study, "--root", tuned.root, *table)
        assert shown.returncode == 0, shown.stderr
        assert "Pareto front of 3 trials" in shown.stdout


# --- the table at 80 columns -----------------------------------------------------------------

LONG = " ".join(
    f"{name}={value}"
    for name, value in [
        ("max_num_seqs", 128),
        ("max_num_batched_tokens", 8192),
        ("enable_chunked_prefill", "true"),
        ("enable_prefix_caching", "false"),
        ("block_size", 128),
        ("enforce_eager", "false"),
        ("kv_cache_dtype", "fp8_e4m3"),
        ("kv_cache_mib", 4096),
        ("omp_bind", "{cores}"),
    ]
)
CAUSE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB"
REASON = (
    "engine exited with status 1; its log says: (EngineCore_DP0 pid=4242) ERROR 12-01 "
    f"10:00:00 [core.py:708] {CAUSE}. GPU 0 has a total capacity of 79.19 GiB of which 1.2 GiB "
    "is free. Including non-PyTorch memory, this process has 78.0 GiB memory in use."
)


def trials() -> list[TrialRecord]:
    metrics = {
        "output_throughput": 23412.5,
        "p50_ttft_ms": 1234.5,
        "p99_ttft_ms": 2345.6,
        "p50_tpot_ms": 12.34,
        "p99_tpot_ms": 23.45,
    }
    ok = [
        TrialRecord(
            number=n,
            state="complete",
            status="ok",
            role="baseline" if n == 0 else "",
            description=LONG,
            metrics={**metrics, "output_throughput": 23412.5 + n},
            spread={"output_throughput": 123.0},
        )
        for n in range(3)
    ]
    oom = TrialRecord(
        number=3, state="complete", status="oom", reason=REASON, description=LONG, device_s=9.0
    )
    predicted = TrialRecord(
        number=4,
        state="complete",
        status="predicted_oom",
        reason="needs at least the memory of trial 3, which ran out of memory",
        description=LONG,
    )
    return [*ok, oom, predicted]


def rendered(width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    print_front(console, "demo", trials(), StudyFacts(), show_all=True)
    return console.export_text().splitlines()


def lines_per_trial(lines: list[str]) -> dict[int, int]:
    """Trial number -> the lines from its first to the next trial's (or the table's end)."""
    starts = {}
    for k, line in enumerate(lines):
        m = re.match(r"^\s*(\d+)[* wb]*\s{2}", line)
        if m and k > 2:
            starts[int(m.group(1))] = k
    end = next(k for k, line in enumerate(lines) if line.startswith(("~ ", "objectives:")))
    bounds = [*sorted(starts.values()), end]
    return {n: bounds[bounds.index(k) + 1] - k for n, k in starts.items()}


def test_at_80_columns_each_trial_takes_at_most_three_lines() -> None:
    lines = rendered(80)
    assert all(len(line) <= 80 for line in lines)
    counts = lines_per_trial(lines)
    assert sorted(counts) == [0, 1, 2, 3, 4]
    assert all(n <= 3 for n in counts.values()), "\n".join(lines)
    text = "\n".join(lines)
    assert "23,412 ±123" in text and "1.00x" in text and "1234.5 / 2345.6" in text
    assert "max_num_seqs=128 max_num_batched_tokens=8192" in text  # the config, readable


def test_a_failure_reason_shows_its_cause_first() -> None:
    text = "\n".join(rendered(80))
    # The cause, not the exit status or vLLM's log prefix, comes right after the kind.
    assert "oom: torch.OutOfMemoryError: CUDA out of memory." in text
    assert "Tried to allocate 20.00" in text
    assert "pid=4242" not in text
    assert "~ predicted_oom: needs at least the memory of trial 3" in text


def test_a_wide_console_keeps_one_table_with_a_readable_config() -> None:
    lines = rendered(200)
    text = "\n".join(lines)
    assert "┃ config" in text and LONG[:60] in text
    assert "oom: torch.OutOfMemoryError: CUDA out of memory" in text
    counts = lines_per_trial_wide(lines)
    assert all(n <= 4 for n in counts), "\n".join(lines)


def lines_per_trial_wide(lines: list[str]) -> list[int]:
    starts = [k for k, line in enumerate(lines) if re.match(r"^│\s+\d+", line)]
    end = next(k for k, line in enumerate(lines) if line.startswith("└"))
    bounds = [*starts, end]
    return [b - a for a, b in itertools.pairwise(bounds)]
