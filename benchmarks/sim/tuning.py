"""Search efficiency on a simulated landscape: the tuner's real StudyRunner, scored by the truth.

Each method runs the tuner's own study loop (`autotune.study.StudyRunner`: baseline first, the
gate's duplicates / known OOMs, recording, the sampler) for `trials` launched trials; only the
device work of a trial is simulated: `SimMeasure` runs the landscape's scheduler over its
workload (`simulate`) on a host whose noise follows a profile (`noise.PROFILES`: per metric,
degraded runs, a cold engine, each device's offset, bad windows), or, as a stress test only,
a per-run level within +-`noise` and a slow drift of up to `drift` over `drift_period_s` of
device time (`noise.Host`): every step 1/speed as long, the requests sent as they would be.
After every launched trial, the config `autotune export` would deploy then (`choose_export`
over the study's records) is scored by the truth (`truth.Truth`): its noise-free simulation,
0 where it misses an SLO or fails. The result per method and seed is that progression, in
launched trials and in device seconds (start-up + the benchmark, as a real trial would cost).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from pooled_margin import choose_pooled_export  # benchmarks/, on the path with sim

from autotune.answer.export import choose_export
from autotune.answer.selection import SelectionError
from autotune.bench import LoadProfile, Stats, Summary, write_records
from autotune.devices import DevicePool
from autotune.devices._hostlock import LOCK_DIR_ENV
from autotune.engine import EngineConfig
from autotune.measure import Measurement
from autotune.space import SearchSpace, load_space
from autotune.spec import TuneSpec
from autotune.store import StudyStore, TrialFacts
from autotune.study import Harness, Machine, StudyRunner
from autotune.vocab import layout
from autotune.vocab.status import TrialStatus

from .landscapes import Landscape
from .noise import DRIFT_PERIOD_S, Host, NoiseProfile, load_share, with_draw
from .simulate import SimResult, simulate
from .truth import Truth, sim_config

STARTUP_S = 60.0  # a CUDA engine's start-up with graphs (vLLM logs: 40-90 s on H100/A100)
FAILED_STARTUP_S = 35.0  # an OOM is found during the memory profile, before graphs


@dataclass
class SimMeasure:
    """The device work of one trial, simulated, as the tuner's `measure` returns it."""

    truth: Truth
    noise: float = 0.0
    drift: float = 0.0
    drift_period_s: float = DRIFT_PERIOD_S
    seed: int = 0
    clock_s: float = 0.0  # device time spent so far: the drift follows it
    profile: NoiseProfile | None = None  # with it, `noise` is unused (the drift still applies)
    warmup: int | None = None  # warm-up requests per run; None: as many as the concurrency
    _host: Host = field(init=False)

    def __post_init__(self) -> None:
        self._host = Host(self.noise, self.drift, self.drift_period_s, self.profile, self.seed)

    def __call__(self, config: EngineConfig, trial_dir: Path, judge: Any = None) -> Measurement:
        result = self.truth.result(config.args)
        if not result.ok:
            self.clock_s += FAILED_STARTUP_S
            status = TrialStatus(result.failure or "crash")
            return Measurement(status, result.reason, device_s=FAILED_STARTUP_S)
        # The benchmark measures the host while it runs: after the start-up, over its duration.
        # The run is on the trial's first leased device, at the load's share of its batch slots.
        land = self.truth.landscape
        cfg = sim_config(land, config.args)
        visible = config.env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        f, draw = self._host.run(
            self.clock_s + STARTUP_S + result.duration_s / 2,
            device=int(visible) if visible.isdigit() else 0,
            warmup=land.workload.concurrency if self.warmup is None else self.warmup,
            concurrency=land.workload.concurrency,
            load=load_share(land.workload, result, cfg.max_num_seqs),
        )
        # The same requests on a host f times as fast: in a closed loop the run stretches by
        # 1/f; under a fixed rate the throughput stays the offered one while batches and
        # queues grow (so the drift fit reads no drift there, autotune.answer.repeats says why).
        raw = simulate(land.hardware, cfg, land.workload, speed=f, records=True)
        device_s = STARTUP_S + raw.duration_s
        self.clock_s += device_s
        summary = measured_summary(land, raw if draw is None else with_draw(raw, draw))
        # What a real trial leaves for the engine model: its requests and the KV capacity its
        # engine logged (`autotune.predict`).
        trial_dir.mkdir(parents=True, exist_ok=True)
        write_records(trial_dir / layout.REQUESTS, raw.records)
        assert raw.memory is not None
        facts = TrialFacts(kv_cache_tokens=raw.memory.kv_tokens)
        # The drift's clock is the device time spent (the recorder stores it as measured_at).
        return Measurement(
            TrialStatus.OK, summary=summary, engine=facts, device_s=device_s, at_s=self.clock_s
        )


def load_profile(landscape: Landscape) -> LoadProfile:
    """The landscape's load as the tuner's spec states it."""
    w = landscape.workload
    return LoadProfile(rate=w.rate, concurrency=w.concurrency, seed=w.seed)


def _stats(p50: float, p99: float) -> Stats:
    return Stats(mean=p50, p50=p50, p90=(p50 + p99) / 2, p99=p99)


def measured_summary(landscape: Landscape, result: SimResult) -> Summary:
    """What the client would have measured of a run the scheduler simulated."""
    n = len(landscape.workload.lengths)
    out = result.output_throughput
    goodput = landscape.score(result) if landscape.metric == "goodput" else 0.0
    return Summary(
        completed=n,
        errors=0,
        duration_s=result.duration_s,
        output_throughput=out,
        total_throughput=out,
        request_throughput=result.request_throughput,
        goodput=goodput,
        ttft_ms=_stats(result.p50_ttft_ms, result.p99_ttft_ms),
        tpot_ms=_stats(result.p50_tpot_ms, result.p99_tpot_ms),
        itl_ms=_stats(result.p50_tpot_ms, result.p99_tpot_ms),
        e2e_ms=_stats(result.p50_ttft_ms, result.p99_ttft_ms),
    )


@dataclass(frozen=True)
class Step:
    """One launched trial: device seconds so far, and the truth of what export would deploy
    (its score, whether it truly misses an SLO, and by how much: `Truth.past`)."""

    device_s: float
    truth: float
    misses: bool = False
    past: float = 0.0


@dataclass(frozen=True)
class Method:
    """A way to search: the spec fields it sets (`search`, `sampler`), and whether its
    export pools the engine model's predictions into the SLO margin
    (`pooled_margin.choose_pooled_export`, beside benchmarks/sim)."""

    name: str
    fields: dict[str, Any]
    pooled: bool = False


METHODS = {
    # The default search before screening (autotune.study._screen): the GP, told only what
    # was measured.
    "gp": Method("gp", {"search": "goal", "sampler": "gp", "screen": "off"}),
    # The same, and each proposal screened by the engine model fitted to the study's trials.
    "gp-screen": Method("gp-screen", {"search": "goal", "sampler": "gp", "screen": "on"}),
    # The same search, its export's SLO margin pooling each run with the model's prediction
    # (benchmarks/pooled_margin.py; measured, not adopted: docs/prediction.md).
    "gp-screen-pooled": Method(
        "gp-screen-pooled", {"search": "goal", "sampler": "gp", "screen": "on"}, pooled=True
    ),
    "gp-once": Method(
        "gp-once", {"search": "goal", "sampler": "gp", "remeasure": "off", "screen": "off"}
    ),
    "tpe": Method("tpe", {"search": "goal", "sampler": "tpe", "screen": "off"}),
    "tpe-once": Method(
        "tpe-once", {"search": "goal", "sampler": "tpe", "remeasure": "off", "screen": "off"}
    ),
    "tpe-pareto": Method("tpe-pareto", {"search": "pareto", "sampler": "tpe", "screen": "off"}),
    "random": Method(
        "random", {"search": "goal", "sampler": "random", "remeasure": "off", "screen": "off"}
    ),
}


def model_folder(landscape: Landscape, root: Path) -> Path:
    """A model folder whose config.json has the landscape's shape (the tuner's constraint
    rules read its heads; there are no weights, so nothing is estimated from them)."""
    folder = root / f"model-{landscape.name}"
    folder.mkdir(parents=True, exist_ok=True)
    m = landscape.hardware.model
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": m.hidden,
        "num_attention_heads": m.heads,
        "num_key_value_heads": m.kv_heads,
        "num_hidden_layers": m.layers,
        "intermediate_size": m.intermediate,
        "vocab_size": m.vocab,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def spec_for(landscape: Landscape, method: Method, seed: int, trials: int, root: Path) -> TuneSpec:
    objectives = [{"metric": landscape.metric, "direction": "maximize"}]
    if landscape.metric == "output_throughput":
        objectives += [
            {"metric": "p99_ttft_ms", "direction": "minimize"},
            {"metric": "p99_tpot_ms", "direction": "minimize"},
        ]
    return TuneSpec.model_validate(
        {
            "study": f"{landscape.name}-{method.name}-{seed}",
            "model": str(model_folder(landscape, root)),
            "space": str(landscape.space),
            "root": root,
            "trials": trials,
            "seed": seed,
            "objectives": objectives,
            "slos": dict(landscape.slos),
            # The load as the landscape sends it (the engine model replays it).
            "load": load_profile(landscape),
            **method.fields,
        }
    )


@contextlib.contextmanager
def own_locks(folder: Path) -> Iterator[None]:
    """The study's host lock in a folder of its own: a simulated trial holds no device, so
    studies side by side (`--jobs`) or a real study on this host need not take turns."""
    before = os.environ.get(LOCK_DIR_ENV)
    os.environ[LOCK_DIR_ENV] = str(folder / "locks")
    try:
        yield
    finally:
        if before is None:
            del os.environ[LOCK_DIR_ENV]
        else:
            os.environ[LOCK_DIR_ENV] = before


def run_method(
    landscape: Landscape,
    method: Method,
    seed: int,
    trials: int,
    truth: Truth,
    noise: float = 0.0,
    drift: float = 0.0,
    root: Path | None = None,
    profile: NoiseProfile | None = None,
) -> list[Step]:
    """One study of `method`: the truth of export's choice after each launched trial."""
    with tempfile.TemporaryDirectory(dir=root) as tmp, own_locks(Path(tmp)):
        spec = spec_for(landscape, method, seed, trials, Path(tmp))
        space = load_space(spec.space)
        measure = SimMeasure(truth, noise=noise, drift=drift, seed=seed * 7919 + 1, profile=profile)
        store = StudyStore(spec.storage_url)
        steps: list[Step] = []

        def after_trial(event: Any) -> None:
            if type(event).__name__ != "TrialFinished":
                return
            steps.append(
                Step(measure.clock_s, *_deployed(store, spec, space, truth, method.pooled))
            )

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        gpus = landscape.hardware.gpus
        # The landscape's host: its GPUs are the pool tensor-parallel trials lease from.
        pool = DevicePool(list(range(gpus)), platform="cuda") if gpus > 1 else None
        harness = Harness(spec, space, measure, machine=Machine(pool=pool))
        StudyRunner(harness, store, after_trial).run()
        return steps


def _deployed(
    store: StudyStore, spec: TuneSpec, space: SearchSpace, truth: Truth, pooled: bool = False
) -> tuple[float, bool, float]:
    """The truth of what export would deploy now: its score, whether it misses an SLO and by
    how much (nothing deployed: 0, no miss)."""
    records = store.trials(spec.study)
    try:
        facts = store.study_facts(spec.study)
        chosen, _ = (choose_pooled_export if pooled else choose_export)(records, facts)
    except SelectionError:
        return 0.0, False, 0.0
    options, _env = space.to_engine(chosen.params)
    return truth.score(options), truth.misses(options), truth.past(options)


def grid_points(space: SearchSpace, landscape: Landscape) -> list[dict[str, Any]]:
    """vLLM's auto_tune.sh: max_num_seqs (outer) x max_num_batched_tokens (inner), powers of
    two within the space, ascending; every other parameter at its baseline (auto_tune.sh fixes
    gpu_memory_utilization)."""
    base = space.baseline_params()
    dists = space.distributions()

    def powers(name: str) -> list[int]:
        d = dists[name]
        low, high = int(d.low), int(d.high)  # type: ignore[attr-defined]
        return [2**k for k in range(math.ceil(math.log2(low)), int(math.log2(high)) + 1)]

    return [
        {**base, "max_num_seqs": s, "max_num_batched_tokens": b}
        for s in powers("max_num_seqs")
        for b in powers("max_num_batched_tokens")
    ]


def run_grid(
    landscape: Landscape,
    truth: Truth,
    noise: float,
    drift: float,
    profile: NoiseProfile | None = None,
) -> list[Step]:
    """The grid in its order; the deployed config is the best measured feasible one so far."""
    space = load_space(landscape.space)
    measure = SimMeasure(truth, noise=noise, drift=drift, seed=1, profile=profile)
    best_measured, best_truth, best_misses, best_past, steps = -1.0, 0.0, False, 0.0, []
    for k, params in enumerate(grid_points(space, landscape)):
        options, _ = space.to_engine(params)
        config = EngineConfig(model="m", args=options)
        with tempfile.TemporaryDirectory() as tmp:  # a trial folder: the records go there
            m = measure(config, Path(tmp) / f"grid-{k}")
        value = 0.0
        if m.summary is not None and _meets(m.summary, landscape.slos):
            value = m.summary.metric(landscape.metric)
        if value > best_measured:
            best_measured, best_truth = value, truth.score(options)
            best_misses, best_past = truth.misses(options), truth.past(options)
        steps.append(Step(measure.clock_s, best_truth, best_misses, best_past))
    return steps


def _meets(summary: Summary, slos: dict[str, float]) -> bool:
    return all(summary.metric(k) <= v for k, v in slos.items())


def reached(steps: Sequence[Step], optimum: float, share: float) -> tuple[int, float] | None:
    """(launched trials, device seconds) until export's choice first scored `share` of the
    optimum; None if it never did."""
    for k, step in enumerate(steps, start=1):
        if step.truth >= share * optimum:
            return k, step.device_s
    return None
