"""When the search runs its incumbent again.

One measurement of a config is one draw of a noisy host (docs/benchmarks.md, "Verdicts", has the
spread over fresh engines), and the host's speed drifts over a study. A lucky run looks better
than it is. So, with `remeasure` on (auto: a goal search at a fixed load), after each launched
trial the study may queue its incumbent to run again, as a trial of role `remeasure`. The
incumbent is the config `autotune export` would deploy if the study ended now (its pick over
the configs' merged runs, held clear of the noise the study measured); while none is feasible,
the one closest to the constraints. Re-measuring what would be deployed is what catches a pick
that a lucky run put inside an SLO bound; re-measuring the best raw mean instead left export
deploying configs measured once (docs/benchmarks.md, "Re-measuring what export would
deploy"). It runs again:

- once `STARTUP` trials were launched (the baseline and the sampler's random start), then
  every `EVERY` launches, so that the re-measures span the study;
- in the budget's last slot, where two or more trials ran since the last one;
- never more than `SHARE` of the budget, never while another queued trial waits.

Selection merges a config's runs (mean metrics; autotune.answer.repeats), so the incumbent's
value is the mean of its runs, not its luckiest. Values are never corrected for drift:
autotune.answer.repeats says why, and the confirm step pairs its rounds instead.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from optuna.study import Study
from optuna.trial import TrialState

from autotune import store as keys
from autotune.answer.repeats import compared
from autotune.answer.selection import SelectionError, closest, pick, slo_noise
from autotune.spec import TuneSpec
from autotune.store import TrialRecord

EVERY = 4  # launches since the incumbent's config last ran before it runs again
STARTUP = 5  # launched trials before the first re-measure
SHARE = 0.25  # of the budget, at most, goes to re-measures


def remeasure_on(spec: TuneSpec) -> bool:
    """Whether the study re-measures its incumbent (auto: a goal search at a fixed load)."""
    if spec.remeasure != "auto":
        return spec.remeasure == "on"
    return spec.search == "goal" and spec.capacity is None


def target(
    records: Sequence[TrialRecord],
    objectives: Sequence[tuple[str, str]],
    budget: int,
    relative: Collection[str] = (),
) -> TrialRecord | None:
    """The config to run again now, if any (its first trial's record): `incumbent`'s, where
    the schedule has a slot for it."""
    launched = sorted((t for t in records if t.device_s is not None), key=lambda t: t.number)
    if len(launched) < STARTUP or len(launched) >= budget:
        return None
    done = sum(1 for t in launched if t.role == keys.ROLE_REMEASURE)
    if done >= max(1, int(budget * SHARE)):
        return None
    anchors = [t.number for t in launched if t.role == keys.ROLE_REMEASURE]
    since = sum(1 for t in launched if t.number > max(anchors, default=-1))
    first_or_every = not anchors or since >= EVERY  # the first anchor, then one every EVERY
    last_slot = len(launched) == budget - 1 and since >= 2  # an anchor after the latest trials
    if not (first_or_every or last_slot):
        return None  # no slot: export's pick (margins over every config) is not worked out
    return incumbent(records, objectives, relative)


def incumbent(
    records: Sequence[TrialRecord],
    objectives: Sequence[tuple[str, str]],
    relative: Collection[str] = (),
) -> TrialRecord | None:
    """The config export would deploy now (`selection.pick` over the configs' merged runs,
    with the SLO noise the study's repeats measured; `relative`: the SLOs set against the
    baseline); while none is feasible (a host that slowed may be why), the one closest to the
    constraints; None before anything was measured."""
    seen = compared(records)
    try:
        return pick(seen, objectives, "", None, slo_noise(records), relative)
    except SelectionError:
        return closest(seen)


def queue_remeasure(study: Study, spec: TuneSpec) -> int | None:
    """Queue the incumbent's config to run again where `target` says so; its trial number."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.WAITING for t in trials):
        return None
    records = [TrialRecord.from_frozen(t) for t in trials]
    objectives = [(o.metric, o.direction) for o in spec.objectives]
    chosen = target(records, objectives, spec.trials, relative=spec.relative_slos)
    if chosen is None:
        return None
    attrs = {keys.ROLE: keys.ROLE_REMEASURE, keys.REMEASURE_OF: chosen.number}
    study.enqueue_trial(chosen.params, user_attrs=attrs)
    return chosen.number
