"""What a new `tune` request may not ask at once: flags that another flag makes meaningless
(else silently ignored), settings whose study could never finish as asked, and goals that
contradict each other. Each is refused in one line before the study exists.

These are judged on the request (`tune`), not on a stored study's spec: `worker`, `confirm`
and `profile` read a study as it was made. The spec's own rules (`TuneSpec`) hold for both.
"""

from __future__ import annotations

from collections.abc import Callable

from autotune.spec._errors import SpecError
from autotune.spec._spec import TuneSpec

# Latencies measured between a request's tokens: none for a one-token request, none in an
# offline batch for ITL (it streams nothing, so no gaps between chunks are seen).
_BETWEEN_TOKENS = ("tpot", "itl")


def check_request(spec: TuneSpec) -> None:
    """SpecError (one line) for the first contradiction in `spec` as a new request."""
    checks: tuple[Callable[[TuneSpec], str | None], ...] = (
        _capacity_ignores,
        _nothing_to_confirm,
        _objectives_against_slos,
        _unmeasurable,
    )
    for check in checks:
        if (problem := check(spec)) is not None:
            raise SpecError(problem)


def _capacity_ignores(spec: TuneSpec) -> str | None:
    """A capacity search chooses each level's rate and runs each level `capacity.repeats`
    times; it prunes nothing (its levels are its own search)."""
    if spec.capacity is None:
        return None
    given_rate = "load" in spec.model_fields_set and "rate" in spec.load.model_fields_set
    if given_rate and spec.load.rate is not None:
        return (
            "--rate with --load capacity: a capacity search sets each level's rate itself (its "
            "answer is the highest that holds the SLOs); drop --rate (--concurrency still caps "
            "the requests in flight)"
        )
    if spec.prune:
        return (
            "--prune with --load capacity: pruning stops a run at a fixed load early, and a "
            "capacity search's levels are a search of their own (none is pruned); drop --prune"
        )
    if spec.repeats > 1:
        return (
            f"--repeats {spec.repeats} with --load capacity: a capacity search runs each level "
            "again itself (capacity.repeats in a --spec file); drop --repeats"
        )
    return None


def _nothing_to_confirm(spec: TuneSpec) -> str | None:
    if spec.confirm and spec.trials < 2:
        return (
            f"--confirm {spec.confirm} with --trials {spec.trials}: the confirm step re-measures "
            "the best configs against the baseline, and one trial is the baseline alone; give "
            "--trials 2 or more, or drop --confirm"
        )
    return None


def _objectives_against_slos(spec: TuneSpec) -> str | None:
    """An objective named twice, or an SLO (an upper bound: `at most`) on a metric the study
    maximizes."""
    seen: dict[str, str] = {}
    for objective in spec.objectives:
        if objective.metric in seen:
            return (
                f"--objective {objective.metric} is given twice ({seen[objective.metric]} and "
                f"{objective.direction}): give each metric once"
            )
        seen[objective.metric] = objective.direction
    for name in [*spec.slos, *spec.relative_slos]:
        if seen.get(name) == "maximize":
            return (
                f"--slo {name} bounds it from above (an SLO says at most), and --objective "
                f"{name}:max asks for the most: drop the SLO (the search already looks for the "
                "highest), or bound another metric"
            )
    return None


def _unmeasurable(spec: TuneSpec) -> str | None:
    """A metric the study cannot measure as asked: one whose bound relative to a healthy
    baseline is 0, or a latency between tokens where there are none."""
    for name in spec.relative_slos:
        if name in ("errors", "error_rate"):
            return (
                f"--slo {name}=baseline*FACTOR: a baseline without failed requests measures 0, "
                f"and a bound of 0 x FACTOR allows none; give --slo {name}=NUMBER"
            )
    named = [*spec.slos, *spec.relative_slos]  # every trial would miss them
    if "objectives" in spec.model_fields_set:  # asked for, not the defaults' p99 TPOT
        named += [o.metric for o in spec.objectives]
    slos = {*spec.slos, *spec.relative_slos}
    for name in named:
        parts = name.split("_")
        if len(parts) != 3 or parts[1] not in _BETWEEN_TOKENS:
            continue
        flag = "--slo" if name in slos else "--objective"
        if spec.scenario == "offline" and parts[1] == "itl":
            return (
                f"{flag} {name}: an offline batch streams nothing, so it has no gaps between "
                "tokens to measure; use p99_tpot_ms instead"
            )
        most = _most_output_tokens(spec)
        if most is not None and most < 2:
            return (
                f"{flag} {name}: every request of the workload generates {most} token, and "
                f"{parts[1].upper()} is measured between a request's tokens; give the workload "
                "output=2 or more"
            )
    return None


def _most_output_tokens(spec: TuneSpec) -> int | None:
    """The most output tokens a request of the workload asks for, where the workload says
    (random and shared-prefix prompts); None for datasets and traces, whose rows do."""
    output = getattr(spec.workload, "output", None)
    if not isinstance(output, int):
        return None
    spread = float(getattr(spec.workload, "output_spread", 0.0) or 0.0)
    return max(1, int(output * (1.0 + spread)))  # as bench._requests draws lengths
