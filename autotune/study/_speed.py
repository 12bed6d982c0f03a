"""A study's host-speed probe at trial time: each trial's reading against the study's first,
and a fixed-rate load that follows it.

Before a trial's benchmark (autotune.study._measure) the fixed work of autotune.devices
(`read_speed`) is timed on its devices. Its rate over the study's first reading is the host's
speed `s` then, relative to the study's start. Under a Poisson rate the run is sent at
`rate * s`: a host at speed `s` under `rate * s` is the host at full speed under `rate` on a
clock `s` times as slow, so its rates / `s` and latencies * `s` are what the user's load
would measure at the study's start (`autotune.drift.compared` applies them). Without that a
slow run's latencies under a fixed rate grow by queueing, which no scaling undoes. In a closed
loop (a concurrency alone) the run is the same schedule stretched, and the scaling alone
holds. A trace's arrivals are its own: they are not moved, and its runs are not scaled
(`scales: false`).

The probe has a spread of its own (`PROBE_SPREAD`), and on a host whose speed does not move
a correction by it is noise added where there was none (in benchmarks/sim it took the SLO
landscape from 6 trials to 98% of the optimum to 12). So the ratio counts only as far as the
study's readings say the host moves (`weight`, empirical Bayes): while their spread is within
what the probe alone gives (a chi-square test at 95%) the speed is 1 and nothing is moved or
scaled; once the host is seen to move, `s = ratio ** w` with `w = 1 - PROBE_SPREAD**2 / their
variance`, near 1 for a host that moves by much more than the probe's spread. A fixed rate
is sent at the speed of the weight then; a closed-loop run is compared at the study's weight
now (`autotune.drift.probed_speed`), so a run probed before the host was seen to move is
corrected once it is.

What a trial records (`engine["speed"]`, `HostSpeed.facts`) is the raw reading, the reference,
the weight, the speed and the rate it sent; the measured metrics stay as measured. A probed
study fits no drift and, with `remeasure: auto`, re-measures nothing: in benchmarks/sim
re-measured incumbents near an SLO bound flipped export on one noisy run (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.bench import LoadProfile
from autotune.devices import SpeedReading, read_speed
from autotune.drift import PROBE_SPREAD, positive, speed_facts, weight
from autotune.engine import DEFAULT_COMMAND, EngineConfig
from autotune.spec import SpecError, TuneSpec


@dataclass
class HostSpeed:
    """The probe of one study: its reference reading, shared by its lanes."""

    platform: str
    cores: str | None = None
    reader: Callable[[str, Mapping[str, str], str | None], SpeedReading | None] = read_speed
    reference: float | None = None
    spread: float = PROBE_SPREAD  # the probe's own (see `weight`)
    readings: list[float] = field(default_factory=list)  # the log of every reading, in order
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def adopt(self, engines: Iterable[Mapping[str, Any]]) -> None:
        """Take the reference and the readings of the study's stored trials (a resumed
        study), if none is set yet: the reference of the first of `engines` (trials' engine
        facts, in order) with one, the readings of every one."""
        with self._lock:
            if self.reference is not None:
                return
            for engine in engines:
                facts = speed_facts(engine)
                if self.reference is None and positive(facts.get("reference")):
                    self.reference = float(facts["reference"])
                if positive(facts.get("reading")):
                    self.readings.append(math.log(facts["reading"]))
            if self.reference is not None and not self.readings:  # the reference is one
                self.readings.append(math.log(self.reference))

    def read(self, config: EngineConfig) -> SpeedReading | None:
        """Time the probe on the devices `config` runs on (its environment: the lease)."""
        return self.reader(self.platform, config.env, self.cores)

    def facts(self, reading: SpeedReading, profile: LoadProfile) -> dict[str, Any]:
        """What a trial records of `reading`; the study's first reading is the reference,
        and the speed is their ratio to the power of the readings' `weight` so far."""
        with self._lock:
            if self.reference is None:
                self.reference = reading.speed
            reference = self.reference
            self.readings.append(math.log(reading.speed))
            w = weight(self.readings, self.spread)
        speed = (reading.speed / reference) ** w
        facts: dict[str, Any] = {
            **reading.to_dict(),
            "reference": reference,
            "weight": w,
            "speed": speed,
            "scales": not profile.trace,
        }
        if profile.rate is not None and math.isfinite(profile.rate):
            facts["rate"] = profile.rate * speed
        return facts


def followed(profile: LoadProfile, facts: Mapping[str, Any] | None) -> LoadProfile:
    """`profile` as the run sends it: at the rate `facts` says (rate * speed), else as it is."""
    rate = facts.get("rate") if facts else None
    if not isinstance(rate, int | float) or not positive(rate):
        return profile
    return profile.model_copy(update={"rate": float(rate)})


def probes_speed(spec: TuneSpec) -> bool:
    """Whether trials read the host's speed first: `speed_probe` on, or auto with vLLM's own
    server command (a custom one may be a stand-in whose speed is not the devices') in a
    server scenario (an offline batch is not probed), on every platform: with the readings
    weighed (`weight`), a host whose speed does not move is not corrected, so in
    benchmarks/sim the probe costs a steady host nothing and meets the targets on a moving
    one (docs/benchmarks.md). Raises SpecError for a probe asked of an offline study."""
    if spec.speed_probe == "on" and spec.scenario == "offline":
        raise SpecError("--speed-probe on: an offline batch is not probed (a server scenario is)")
    if spec.speed_probe != "auto":
        return spec.speed_probe == "on"
    return spec.engine.command == DEFAULT_COMMAND and spec.scenario != "offline"
