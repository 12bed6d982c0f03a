"""`autotune bench`: benchmark any running OpenAI-compatible endpoint, no study."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import httpx
import typer

from autotune.bench import (
    LoadProfile,
    build_requests,
    parse_workload,
    run_benchmark,
    summarize,
    write_records,
)
from autotune.cli._common import InputError, cli_errors, console
from autotune.spec import parse_pairs


def bench(
    url: Annotated[str, typer.Option(help="Base URL, e.g. http://127.0.0.1:8000")],
    workload: Annotated[str, typer.Option(help="random:input=..,output=..,prompts=..")],
    model: Annotated[str | None, typer.Option(help="Model name (default: from /v1/models)")] = None,
    model_path: Annotated[
        str | None, typer.Option(help="Local model folder for token ids (default: --model)")
    ] = None,
    rate: Annotated[float | None, typer.Option(help="Poisson rate, requests/s")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Requests in flight")] = None,
    slo: Annotated[list[str] | None, typer.Option(help="METRIC=BOUND for goodput")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write summary JSON")] = None,
    records_out: Annotated[Path | None, typer.Option("--records", help="Per-request JSONL")] = None,
) -> None:
    """Measure an endpoint with the tuner's client and metrics (docs/metrics.md)."""
    with cli_errors():
        if rate is None and concurrency is None:
            raise InputError("give --rate R or --concurrency C (or both)")
        name = model or _served_model(url)
        warmup, requests = build_requests(parse_workload(workload), model_path or name)
        profile = LoadProfile(rate=rate, concurrency=concurrency)
        records = run_benchmark(url, name, warmup, requests, profile)
        summary = summarize(records, parse_pairs(slo or [], "--slo"))
        if records_out is not None:
            write_records(records_out, records)
        if json_out is not None:
            json_out.write_text(summary.model_dump_json(indent=2) + "\n")
        console.print_json(summary.model_dump_json())


def _served_model(url: str) -> str:
    try:
        data = httpx.get(url.rstrip("/") + "/v1/models", timeout=10).json()
        return str(data["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        raise InputError(f"cannot read the model name from {url}/v1/models: {exc}") from None
