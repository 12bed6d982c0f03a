"""The confirm step: re-measure the best candidates and the baseline, side by side, and say
plainly whether anything beats the defaults.

One run can crown the wrong config on a noisy host (docs/benchmarks.md, "Verdicts", has this
host's run-to-run spread over fresh engines). After the budget, the top `top` feasible configs
other than the baseline (by their conservative primary objective) and the baseline are each
measured again, `rounds` times, in alternating order (A B base, then base B A, ...), each on a
fresh engine, so that drift hits every candidate alike. Where the host holds a round's engines
at once (a CPU host taken whole, with the memory for all of them: `Harness.together`), they all
start, then send their batches in turns (A base A base ...) until each has measured what its
run must (`measure/_turns.py`): the configs are compared seconds apart rather than minutes;
elsewhere one engine runs after the other. The values are the engine's, as measured: no
correction.

- **SLOs are judged per round, then over rounds.** A bound relative to the baseline
  (`--slo p99_ttft_ms=baseline*1.2`) is, in each round, the factor times what the baseline
  measured *in that round* (paired): the baseline can never miss a bound relative to itself,
  and a round on a slow host moves both alike. An absolute bound is the number given. A
  candidate holds an SLO when the median over rounds of `measured / bound` is <= 1 (the
  spread is shown beside it); a p99 over a small workload is about its largest sample, and
  one bad round does not decide. A candidate that failed to run in any round is out.
- **The best candidate** is the qualified non-baseline config with the best conservative
  primary value (median made worse by the spread, half the range).
- **Its gain over the baseline** is an interval from the per-round paired ratios
  (`candidate / baseline - 1`, better = positive): their mean +- Student's t (scipy, 90%
  two-sided) times the standard error. Only an interval above 0 is a gain; the winner (what
  `export` deploys) is then the candidate, else the baseline, and the verdict says which in
  plain words ("no config measured better than your defaults; best candidate trial 4: -3% to
  +5%"). Where the baseline itself misses an SLO over the rounds (absolute, or tighter than
  its own value), a qualified candidate wins on that alone; its interval is then the price.
- **A degraded round is left out and made again.** After each round, from the third, every
  round, the first included, is judged against the others: a round in which a candidate's
  ratio to the baseline departs from its ratios in the other rounds by more than
  `ROUND_FLOOR` (an engine that ran at half speed through its round, or a round the host
  slowed between its two engines) leaves the step's runs (its folders stay on disk), is
  listed in `degraded_rounds`, and one more round is run in its place (`MAX_LEFT_OUT`).
- **The baseline is never confirmed alone**: with no other feasible config the step runs
  nothing and says so.

The result is kept with the study (user attribute `confirm`, updated after every run, and
`confirm.json` in the study folder); every run keeps its folder under `confirm/`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from autotune.answer.repeats import compared
from autotune.answer.selection import (
    baseline,
    study_objectives,
)
from autotune.bench import degraded
from autotune.engine import EngineConfig
from autotune.measure import Measure, Measurement, Turns
from autotune.space import SearchSpace
from autotune.spec import TuneSpec
from autotune.store import StudyStore, TrialRecord
from autotune.study._harness import Harness
from autotune.study._host_fit import trial_engine_config
from autotune.study._sequential import SMALLEST, look
from autotune.study._verdict import (
    Bounds,
    ConfirmRun,
    Stopping,
    departing_round,
    evaluate,
    paired_gains,
)
from autotune.vocab import layout

CONFIRM_FILE = "confirm.json"
MAX_LEFT_OUT = 1  # degraded rounds a step leaves out and makes again
Together = Callable[[list[dict[str, Any]]], AbstractContextManager[list[EngineConfig]] | None]


def choose_candidates(
    records: Sequence[TrialRecord], objectives: Sequence[tuple[str, str]], top: int
) -> list[TrialRecord]:
    """The `top` best feasible trials other than the baseline, by conservative primary value,
    then the baseline if it was measured. Empty when no trial but the baseline is feasible:
    the baseline is never confirmed against itself alone. Trials are compared as
    `autotune.answer.repeats.compared` sees them (the runs of one config merged)."""
    records = compared(records)
    metric, direction = objectives[0]
    sign = 1.0 if direction == "maximize" else -1.0
    base = baseline(records)
    others = [t for t in records if t.feasible and (base is None or t.number != base.number)]
    ranked = sorted(others, key=lambda t: (-sign * t.conservative(metric, direction), t.number))
    chosen = ranked[:top]
    if not chosen:
        return []
    return [*chosen, base] if base is not None else chosen


def round_order(numbers: Sequence[int], round_index: int) -> list[int]:
    """Candidates in alternating order: forward in even rounds, backward in odd ones."""
    return list(numbers) if round_index % 2 == 0 else list(reversed(numbers))


@dataclass
class Confirmer:
    """Runs the confirm step of a study whose trials are stored."""

    spec: TuneSpec
    space: SearchSpace
    store: StudyStore
    measure: Measure
    on_run: Callable[[int, int, int, Measurement], None] = lambda r, n, total, m: None
    # The engine config of a candidate's params, on devices leased as the trials' were
    # (`Harness.leased`); None: the host as a whole.
    configure: Callable[[dict[str, Any]], AbstractContextManager[EngineConfig]] | None = None
    smallest: float = SMALLEST  # the smallest gain worth deploying (the step's equivalence)
    # The engine configs of a round's params, held to run at once in turns
    # (`Harness.together`); None, or None for a round: one engine after the other.
    together: Together | None = None
    cancel: threading.Event = field(default_factory=threading.Event)  # set: Ctrl-C
    degraded: list[dict[str, Any]] = field(default_factory=list)  # runs made again
    left_out: list[dict[str, Any]] = field(default_factory=list)  # degraded rounds, made again
    turns: list[dict[str, Any]] = field(default_factory=list)  # each round in turns: its order

    @classmethod
    def of(
        cls,
        harness: Harness,
        store: StudyStore,
        on_run: Callable[[int, int, int, Measurement], None] = lambda r, n, total, m: None,
    ) -> Confirmer:
        """The confirm step of `harness`'s study: its measure, on devices leased as the trials'
        were. Its runs are summarized (goodput) within the bounds the study's baseline fixed,
        as the trials' were, so the harness adopts them from the store first."""
        harness.bounds.adopt(store.study_facts(harness.spec.study))
        return cls(
            harness.spec,
            harness.space,
            store,
            harness.measure,
            on_run=on_run,
            configure=harness.leased,
            smallest=harness.spec.min_gain,
            together=harness.together,
            cancel=harness.machine.cancel,
        )

    def run(self, top: int, rounds: int) -> dict[str, Any]:
        name = self.spec.study
        records = self.store.trials(name)
        facts = self.store.study_facts(name)
        bounds = Bounds.of_study(facts, self.spec)
        objectives = study_objectives(facts)
        metric, direction = objectives[0]
        chosen = choose_candidates(records, objectives, top)
        numbers = [t.number for t in chosen]
        base = baseline(records)
        base_number = base.number if base is not None else None
        result: dict[str, Any] = {
            "metric": metric,
            "direction": direction,
            "top": top,
            "rounds": rounds if chosen else 0,
            "order": [round_order(numbers, k) for k in range(rounds)] if chosen else [],
            "baseline": base_number,
            "started": _now(),
        }
        runs: list[ConfirmRun] = []
        if not chosen:
            result.update(_nothing_to_confirm(base))
            result["finished"] = _now()
            self._keep(result)
            return result
        by_number = {t.number: t for t in chosen}
        # A second confirm step keeps the first's folders.
        stamp = result["started"].replace(":", "").replace("+0000", "Z")
        stop = Stopping(rounds, self.smallest)
        active, done = list(numbers), 0
        while done - len(self.left_out) < rounds and stop.ended is None:
            order = round_order(active, done)
            kept = done + 1 - len(self.left_out)
            for number, m in self._round(done, order, by_number, stamp, metric, bounds, runs):
                self.on_run(done, number, len(runs), m)
                state = evaluate(runs, numbers, direction, base_number, kept, bounds, stop)
                self._keep({**result, **state, **self._record()})
            done += 1
            self._screen(runs, active, base_number)
            kept = done - len(self.left_out)
            stop = self._looked(runs, numbers, direction, base_number, kept, bounds, stop)
            active = [n for n in numbers if n not in stop.dropped]
        stop = stop if stop.ended is not None else replace(stop, ended="budget")
        kept = done - len(self.left_out)
        result.update(rounds=kept, run_rounds=done, max_rounds=rounds, ended=stop.ended)
        result.update(self._record())
        final = {**result, **evaluate(runs, numbers, direction, base_number, kept, bounds, stop)}
        if self.left_out:
            final["gain"]["verdict"] += "; " + "; ".join(d["why"] for d in self.left_out)
        final["finished"] = _now()
        self._keep(final)
        return final

    def _record(self) -> dict[str, Any]:
        return {"degraded": self.degraded, "degraded_rounds": self.left_out, "turns": self.turns}

    def _screen(self, runs: list[ConfirmRun], active: Sequence[int], base: int | None) -> None:
        """After a round: a round, earlier ones included, in which a candidate's engine (or
        the baseline's) ran far from its pace in the other rounds, relative to the other
        engine (`departing_round`), leaves the step's runs (its folders stay on disk) and is
        made again as an extra round; at most `MAX_LEFT_OUT` rounds a step."""
        if base is None or len(self.left_out) >= MAX_LEFT_OUT:
            return
        out = departing_round(runs, active, base)
        if out is None:
            return
        why = (
            f"round {out.round + 1} left out as degraded and made again: trial {out.trial} "
            f"measured {out.ratio:.2f}x the defaults there, {out.others:.2f}x in the other rounds"
        )
        values = {r.trial: r.value for r in runs if r.round == out.round}
        self.left_out.append(
            {"round": out.round, "trial": out.trial, "ratio": round(out.ratio, 4),
             "others": round(out.others, 4), "values": values, "why": why}
        )  # fmt: skip
        runs[:] = [r for r in runs if r.round != out.round]

    def _round(
        self,
        k: int,
        order: list[int],
        trials: dict[int, TrialRecord],
        stamp: str,
        metric: str,
        bounds: Bounds,
        runs: list[ConfirmRun],
    ) -> Iterator[tuple[int, Measurement]]:
        """Round `k`: each config of `order` measured, its run appended to `runs` and yielded.
        Where the host holds their engines at once (`together`), they all start, then take
        turns batch by batch (`measure.Turns`); else one engine after the other."""
        held = None
        if self.together is not None and len(order) > 1:
            held = self.together([trials[n].params for n in order])
        if held is None:
            for number in order:
                yield number, self._measured(k, number, trials[number], stamp, metric, bounds, runs)
            return
        with held as configs:
            measured = self._in_turns(k, order, configs, stamp)
        for number in order:
            m = measured[number]
            yield number, self._measured(k, number, trials[number], stamp, metric, bounds, runs, m)

    def _in_turns(
        self, k: int, order: list[int], configs: list[EngineConfig], stamp: str
    ) -> dict[int, Measurement]:
        """Round `k`'s engines, one thread each (an engine is started and torn down by one
        thread: its parent-death signal follows that thread), measured in turns. Ctrl-C
        cancels them all: each tears its engine down."""
        turns = Turns(len(order), self.cancel)
        measured: dict[int, Measurement] = {}
        errors: list[BaseException] = []

        def one(i: int, number: int, config: EngineConfig) -> None:
            folder = layout.confirm_run_dir(self.spec.study_dir, stamp, k, number)
            try:
                measured[number] = self.measure(config, folder, turn=turns.party(i))
            except BaseException as exc:  # re-raised in the step's own thread
                errors.append(exc)
            finally:
                turns.leave(i)

        threads = [
            threading.Thread(target=one, args=(i, n, c), name=f"confirm-{k}-{n}")
            for i, (n, c) in enumerate(zip(order, configs, strict=True))
        ]
        try:
            for thread in threads:
                thread.start()
            while any(thread.is_alive() for thread in threads):
                for thread in threads:
                    thread.join(timeout=0.2)
        except KeyboardInterrupt:
            self.cancel.set()
            for thread in threads:
                if thread.ident is not None:
                    thread.join()
            raise
        if errors:
            raise errors[0]
        self.turns.append({"round": k, "batches": [order[i] for i in turns.batches]})
        return measured

    def _measured(
        self,
        k: int,
        number: int,
        trial: TrialRecord,
        stamp: str,
        metric: str,
        bounds: Bounds,
        runs: list[ConfirmRun],
        m: Measurement | None = None,
    ) -> Measurement:
        """Round `k`'s run of `trial` (`m`: measured already, in turns), appended to `runs`; a
        run that departs from the config's earlier runs of the step by more than their own
        noise allows (`degraded`) is made once again, alone, in a folder of its own, and the
        step keeps both on disk and notes it."""
        folder = layout.confirm_run_dir(self.spec.study_dir, stamp, k, number)
        if m is None:
            with self._configured(trial.params) as config:
                m = self.measure(config, folder)
        run = self._run(k, number, m, metric, bounds)
        earlier = [r.value for r in runs if r.trial == number and r.value is not None]
        if run.value is not None and degraded([*earlier, run.value]):
            again = folder.with_name(folder.name + "-again")
            with self._configured(trial.params) as config:
                m = self.measure(config, again)
            redo = self._run(k, number, m, metric, bounds)
            self.degraded.append(
                {"round": k, "trial": number, "value": run.value, "again": redo.value}
            )
            run = redo
        runs.append(run)
        return m

    @staticmethod
    def _looked(
        runs: Sequence[ConfirmRun],
        numbers: Sequence[int],
        direction: str,
        base: int | None,
        done: int,
        bounds: Bounds,
        stop: Stopping,
    ) -> Stopping:
        """The step after a round's look (`study/_sequential.py`): candidates whose gain's
        interval lies below 0 are dropped; the step ends when none is left, or when the best
        candidate's interval is above 0 or within the smallest gain worth deploying. Where
        the defaults miss the SLOs over the rounds (a bound tighter than the baseline's own
        value), a candidate's interval is the price of holding them: none is dropped, and
        the step ends as soon as the best one's interval decides either way."""
        if base is None:
            return stop
        state = evaluate(runs, numbers, direction, base, done, bounds, stop)
        if not state["candidates"][str(base)]["holds"] and bounds.names:
            decision = state["gain"].get("decision")
            return replace(stop, ended=decision) if decision is not None else stop
        dropped = set(stop.dropped)
        for number in numbers:
            if number == base or number in dropped:
                continue
            seen = look(paired_gains(runs, number, base, direction), stop.max_rounds, stop.smallest)
            if seen is not None and seen.decision == "worse":
                dropped.add(number)
        if all(n in dropped for n in numbers if n != base):
            return replace(stop, dropped=frozenset(dropped), ended="worse")
        if dropped != stop.dropped:  # the best candidate may have changed: look again
            stop = replace(stop, dropped=frozenset(dropped))
            state = evaluate(runs, numbers, direction, base, done, bounds, stop)
        decision = state["gain"].get("decision")
        return replace(stop, ended=decision) if decision in ("gain", "equivalent") else stop

    def _configured(self, params: dict[str, Any]) -> AbstractContextManager[EngineConfig]:
        if self.configure is not None:
            return self.configure(params)
        return nullcontext(trial_engine_config(self.spec, self.space, params))

    def _run(self, k: int, number: int, m: Measurement, metric: str, bounds: Bounds) -> ConfirmRun:
        """One run's values, as the engine measured them."""
        if not m.ok or m.summary is None:
            return ConfirmRun(k, number, m.status, None, m.device_s)
        summary = m.summary
        value = summary.metric(metric)
        slos = {name: summary.metric(name) for name in bounds.names}
        error_rate = summary.metric("error_rate")
        return ConfirmRun(
            k,
            number,
            m.status,
            value if math.isfinite(value) else None,
            m.device_s,
            slos,
            error_rate if math.isfinite(error_rate) else 0.0,
        )

    def _keep(self, result: dict[str, Any]) -> None:
        """After every run: a crash loses no confirm measurement."""
        self.store.write_study_facts(self.spec.study, confirm=result)
        path = self.spec.study_dir / CONFIRM_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))


def _nothing_to_confirm(base: TrialRecord | None) -> dict[str, Any]:
    """The result when no config but the baseline met the SLOs in the search: nothing is run."""
    if base is not None and base.feasible:
        verdict = (
            "no config measured better than your defaults: no trial but the baseline met the "
            "SLOs; the winner is the baseline (not re-measured)"
        )
        return {"candidates": {}, "best_candidate": None, "winner": base.number,
                "gain": {"verdict": verdict}}  # fmt: skip
    verdict = "no winner: no measured trial met the SLOs; nothing was re-measured"
    return {"candidates": {}, "best_candidate": None, "winner": None, "gain": {"verdict": verdict}}


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
