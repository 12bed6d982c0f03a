"""`autotune bench`: benchmark any running OpenAI-compatible endpoint, no study."""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import httpx
import typer

from autotune.bench import (
    METRIC_NAMES,
    EngineCounters,
    LoadProfile,
    RequestRecord,
    TraceWorkload,
    VllmBenchError,
    build_requests,
    check_installed,
    check_workload,
    parse_workload,
    run_benchmark,
    summarize,
    with_rates,
    write_records,
)
from autotune.cli._common import (
    CommandFailed,
    InputError,
    check_bounded,
    checked_output,
    cli_errors,
    console,
    err_console,
    parse_load_client,
)
from autotune.inputs.limits import MAX_RATE, MAX_REQUESTS
from autotune.inputs.wording import did_you_mean
from autotune.spec import parse_pairs


def bench(
    url: Annotated[str, typer.Option(help="Base URL, e.g. http://127.0.0.1:8000")],
    workload: Annotated[str, typer.Option(help="random:input=..,output=..,prompts=..")],
    model: Annotated[str | None, typer.Option(help="Model name (default: from /v1/models)")] = None,
    model_path: Annotated[
        str | None, typer.Option(help="Local model folder for token ids (default: --model)")
    ] = None,
    rate: Annotated[float | None, typer.Option(help="Poisson rate, requests/s")] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Requests in flight")] = None,
    slo: Annotated[list[str] | None, typer.Option(help="METRIC=BOUND for goodput")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write summary JSON")] = None,
    records_out: Annotated[Path | None, typer.Option("--records", help="Per-request JSONL")] = None,
    load_client: Annotated[
        str, typer.Option(help="Who sends the requests: autotune or vllm-bench (vLLM's client)")
    ] = "autotune",
) -> None:
    """Measure an endpoint with the tuner's client and metrics (docs/metrics.md)."""
    with cli_errors():
        check_url(url)
        load = parse_workload(workload)
        trace = isinstance(load, TraceWorkload)
        if trace and rate is not None:
            raise InputError("a trace sets its own arrivals: drop --rate (use rate_scale=N)")
        if rate is None and concurrency is None and not trace:
            raise InputError("give --rate R or --concurrency C (or both)")
        if rate is not None and not math.isinf(rate):  # inf: all at once
            check_bounded("--rate", rate, 0, MAX_RATE, low_open=True)
        if concurrency is not None:
            check_bounded("--concurrency", concurrency, 1, MAX_REQUESTS)
        client = parse_load_client(load_client)
        if client == "vllm-bench":
            try:
                check_workload(load)
                check_installed()
            except VllmBenchError as exc:
                raise InputError(str(exc)) from None
        slos = _slos(slo or [])
        for flag, path in (("--json", json_out), ("--records", records_out)):
            if path is not None:
                checked_output(flag, path)
        name = model or _served_model(url)
        warmup, requests = build_requests(load, model_path or name)
        profile = LoadProfile(rate=rate, concurrency=concurrency, trace=trace)
        counters = EngineCounters(url)
        with _held_warnings() as warnings:
            records = run_benchmark(
                url, name, warmup, requests, profile, before_measured=counters.start,
                client=client, tokenizer=model_path or name,
            )  # fmt: skip
        _write(records_out, lambda path: write_records(path, records))
        failed = Counter(" ".join(r.error.split()) for r in records if r.error is not None)
        if failed.total() == len(records):
            raise CommandFailed(f"no request to {url} completed: {_failures(failed, records)}")
        summary = with_rates(summarize(records, slos), counters.counted())
        _write(json_out, lambda path: path.write_text(summary.model_dump_json(indent=2) + "\n"))
        console.print_json(summary.model_dump_json())
        notes = [*warnings, _failures(failed, records)] if failed else warnings
        for line in notes:
            err_console.print(f"warning: {line}", soft_wrap=True, markup=False)


def check_url(url: str) -> None:
    """An endpoint's base URL must be `http(s)://HOST[:PORT]`."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise InputError(f"--url {url}: the port is not a number 0-65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        hint = f" (did you mean http://{url}?)" if "://" not in url else ""
        raise InputError(f"--url {url}: expected http://HOST:PORT{hint}")


def _slos(items: list[str]) -> dict[str, float]:
    slos = parse_pairs(items, "--slo")
    for name, bound in slos.items():
        if name not in METRIC_NAMES:
            hint = did_you_mean(name, METRIC_NAMES) or f" (known: {', '.join(METRIC_NAMES)})"
            raise InputError(f"--slo {name}: unknown metric{hint}")
        if not 0 < bound < math.inf:  # NaN and inf too: they bound nothing
            raise InputError(f"--slo {name}={bound:g}: a bound must be a finite number > 0")
    return slos


def _failures(failed: Counter[str], records: list[RequestRecord]) -> str:
    """`3 of 8 requests failed, 3 with HTTP 500: ...` (the most common error)."""
    reason, count = failed.most_common(1)[0]
    reason = reason.removeprefix("HTTPStreamError: ")
    return f"{failed.total()} of {len(records)} requests failed, {count} with {reason}"


def _write(path: Path | None, write: Callable[[Path], object]) -> None:
    if path is None:
        return
    try:
        write(path)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


@contextmanager
def _held_warnings() -> Iterator[list[str]]:
    """The load client's warnings (failed warm-up requests), held for the CLI to print after
    the result, or to drop when the one error line says more."""
    held: list[str] = []

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(record.getMessage())

    logger = logging.getLogger("autotune.bench")
    handler, propagate = Hold(logging.WARNING), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield held
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _served_model(url: str) -> str:
    models = url.rstrip("/") + "/v1/models"
    try:
        response = httpx.get(models, timeout=10)
        if response.status_code != httpx.codes.OK:
            raise InputError(
                f"cannot read the model name from {models}: the server answered HTTP "
                f"{response.status_code}; pass --model NAME"
            )
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"cannot read the model name from {models}: {detail}") from None
