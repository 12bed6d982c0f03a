"""One trial's device work: start the engine, run the workload, tear down. Knows no Optuna."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.bench import (
    LoadProfile,
    RequestSpec,
    Summary,
    run_benchmark,
    summarize,
    write_records,
)
from autotune.engine import (
    EngineConfig,
    EngineError,
    Failure,
    FailureKind,
    LaunchSettings,
    TeardownError,
    launch,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Workplan:
    """What every trial runs: the same requests under the same load."""

    warmup: Sequence[RequestSpec]
    requests: Sequence[RequestSpec]
    profile: LoadProfile
    slos: Mapping[str, float]
    max_error_rate: float = 0.0


@dataclass
class Measurement:
    """The outcome of one trial on the device."""

    status: str
    reason: str = ""
    summary: Summary | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    device_s: float = 0.0
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.summary is not None and self.status == "ok"


Measure = Callable[[EngineConfig, Path], Measurement]


def measure(
    config: EngineConfig,
    trial_dir: Path,
    plan: Workplan,
    settings: LaunchSettings,
    clock: Callable[[], float] = time.monotonic,
) -> Measurement:
    """Launch `config`, run `plan` against it, and report; the engine is always torn down."""
    started = clock()
    result = Measurement(status="ok")
    try:
        with launch(config, settings, trial_dir) as engine:
            result.engine = {"startup_s": round(engine.startup_s, 2), **engine.facts.model_dump()}
            records = run_benchmark(
                engine.url, config.api_model_name, plan.warmup, plan.requests, plan.profile
            )
            write_records(trial_dir / "requests.jsonl", records)
            if not engine.alive():
                _fail(result, engine.failure(FailureKind.CRASH))
            else:
                result.summary = summarize(records, plan.slos)
                if result.summary.completed == 0:
                    first = next((r.error for r in records if r.error), "no request completed")
                    _fail(result, Failure(FailureKind.BENCHMARK_ERROR, first or ""))
    except EngineError as exc:
        _fail(result, exc.failure)
        if exc.startup_s is not None:
            result.engine["startup_s"] = round(exc.startup_s, 2)
    except TeardownError as exc:
        logger.error("%s", exc)
        result.reason = f"teardown: {exc}"
    result.device_s = round(clock() - started, 2)
    return result


def _fail(result: Measurement, failure: Failure) -> None:
    result.status = str(failure.kind)
    result.reason = failure.reason
    result.log_tail = failure.log_tail
    result.summary = None
