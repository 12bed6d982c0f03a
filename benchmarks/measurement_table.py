"""The measurement table of benchmarks/search_efficiency.py: each distinct engine config
measured once on the real engine, with the tuner's own `measure`, and kept in a JSON file that
every method and seed reads, so that all of them see identical measurements."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.bench import Summary, build_requests
from autotune.engine import EngineConfig, LaunchSettings
from autotune.measure import Measurement, Workplan, measure
from autotune.space import SearchSpace
from autotune.spec import TuneSpec
from autotune.store import TrialFacts


def config_key(config: EngineConfig) -> str:
    """What makes two trials the same measurement: the engine's options and environment."""
    return json.dumps({"args": config.args, "env": config.env}, sort_keys=True, default=str)


@dataclass
class MeasurementTable:
    """Each distinct config measured once by `measure_fn`, kept in `path` (JSON) with the
    `header` (model, engine, workload, load, SLOs) it was measured under."""

    path: Path
    header: dict[str, Any]
    measure_fn: Callable[[EngineConfig, Path], Measurement]
    describe: Callable[[dict[str, Any]], str]
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    measured_now: int = 0

    def __post_init__(self) -> None:
        if self.path.exists():
            data = json.loads(self.path.read_text())
            if data.get("header") != self.header:
                raise SystemExit(f"{self.path} was measured with other settings: use another one")
            self.entries = data["measurements"]

    def measurement(self, config: EngineConfig, params: dict[str, Any]) -> Measurement:
        """The config's measurement, measured now if the table has none."""
        key = config_key(config)
        if key not in self.entries:
            self.entries[key] = self._measure(config, params, key)
            self._save()
        return self.get(key)

    def get(self, key: str) -> Measurement:
        entry = self.entries[key]
        summary = None if entry["summary"] is None else Summary.model_validate(entry["summary"])
        kept = {k: entry[k] for k in ("status", "reason", "device_s")}
        return Measurement(**kept, summary=summary, engine=TrialFacts.read(entry["engine"]))

    def brief(self, key: str) -> dict[str, Any]:
        return {k: self.entries[key][k] for k in ("params", "status", "device_s")}

    def _measure(self, config: EngineConfig, params: dict[str, Any], key: str) -> dict[str, Any]:
        trial_dir = self.path.parent / "runs" / hashlib.sha1(key.encode()).hexdigest()[:12]
        shutil.rmtree(trial_dir, ignore_errors=True)  # left by an interrupted run
        print(f"  measuring {self.describe(params)} ...", flush=True)
        m = self.measure_fn(config, trial_dir)
        if m.teardown_error:
            raise SystemExit(f"an engine survived its teardown: {m.teardown_error}; stopping")
        self.measured_now += 1
        outcome = m.status if m.ok else f"{m.status}: {m.reason[:200]}"
        print(f"    {outcome} ({m.device_s:.1f} device s; {trial_dir})", flush=True)
        summary = None if m.summary is None else m.summary.model_dump()
        return {"params": params, "status": m.status, "reason": m.reason, "device_s": m.device_s,
                "summary": summary, "engine": m.engine.stored(),
                "trial_dir": str(trial_dir)}  # fmt: skip

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = {"header": self.header, "measurements": self.entries}
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.replace(self.path)


def make_table(spec: TuneSpec, space: SearchSpace, path: Path) -> MeasurementTable:
    """The table, measuring as `autotune tune` measures a trial."""
    warmup, requests = build_requests(spec.workload, spec.model)
    engine = spec.engine
    plan = Workplan(warmup, requests, spec.load, spec.slos, spec.max_error_rate,
                    hang_s=engine.hang_timeout_s, deadline_s=engine.benchmark_timeout_s,
                    capacity=spec.capacity)  # fmt: skip
    settings = LaunchSettings(command=engine.command, startup_timeout_s=engine.startup_timeout_s,
                              cache_dir=spec.root / ".cache", cores=engine.cores,
                              platform=space.platform)  # fmt: skip
    measured = {"workload", "load", "capacity", "slos", "max_error_rate"}
    model = str(Path(spec.model).resolve()) if Path(spec.model).exists() else spec.model
    header = {"model": model, "engine_command": spec.engine.command}
    header.update(spec.model_dump(mode="json", include=measured))
    return MeasurementTable(
        path,
        header,
        lambda config, trial_dir: measure(config, trial_dir, plan, settings),
        space.describe,
    )
