"""What deterministic failures teach: rules of parameter values that cannot run here.

A pure function of the study's trials as `Tried` (nothing is read or recorded here): the
gate (`_gate.py`) predicts a proposal that carries all the values of a rule.

- A trial that failed `unsupported` (vLLM said a value is not supported here) is attributed to
  its values that no config known to start has had (*uncleared* values). Where every value has
  started somewhere (a combination fails), to the values that differ from the nearest config
  known to start. One such failure makes a rule.
- Two `unsupported` failures with the same signature (`engine.failure_signature`: their
  reason without the numbers, pids and prefixes that differ between runs) make the rule of
  the values they share: the values they differ on did not cause it.
- A `crash` proves nothing once: two crashes with the same signature whose attributions share
  values make the rule of those shared values (deterministic after two).

A config is *known to start* when it was measured (ok, pruned) or got past start-up before it
failed (see `Tried.started`); a trial that failed `unsupported` or `crash` never clears a value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from autotune.engine import failure_signature
from autotune.vocab.status import TrialStatus

Params = dict[str, Any]

# The kinds a rule is learned from: deterministic failures of a value, not of the moment.
LEARNED_KINDS = frozenset({TrialStatus.UNSUPPORTED, TrialStatus.CRASH})


@dataclass(frozen=True)
class Tried:
    """A finished trial as the rules see it. `started`: it got past start-up (measured, or
    failed later: its values are known to start)."""

    number: int
    params: Params
    status: str
    reason: str = ""
    started: bool = False


@dataclass(frozen=True)
class LearnedRule:
    """Configs that carry every one of `values` fail as the trials `trials` did."""

    trials: tuple[int, ...]
    values: Params
    kind: TrialStatus  # UNSUPPORTED or CRASH: what the trials were recorded as
    reason: str  # the first trial's reason

    def matches(self, params: Mapping[str, Any]) -> bool:
        return all(k in params and same_value(params[k], v) for k, v in self.values.items())


def same_value(a: Any, b: Any) -> bool:
    """Equal and of one type: 1, 1.0 and True are different engine values."""
    return type(a) is type(b) and a == b


def learned_rules(tried: Sequence[Tried]) -> list[LearnedRule]:
    """The rules that `tried` teaches, most general (fewest values) first."""
    known = [t.params for t in tried if t.started and t.status not in LEARNED_KINDS]
    failed = [t for t in tried if t.status in LEARNED_KINDS]
    blamed = {t.number: _attribute(t.params, known) for t in failed}
    rules: list[LearnedRule] = []
    for t in failed:
        if t.status == TrialStatus.UNSUPPORTED and blamed[t.number]:
            rules.append(
                LearnedRule((t.number,), blamed[t.number], TrialStatus.UNSUPPORTED, t.reason)
            )
    for a, b in combinations(failed, 2):
        if a.status != b.status or failure_signature(a.reason) != failure_signature(b.reason):
            continue
        shared = _shared(blamed[a.number], blamed[b.number])
        if shared:
            rules.append(LearnedRule((a.number, b.number), shared, TrialStatus(a.status), a.reason))
    return _distinct(rules)


def _attribute(params: Params, known: Sequence[Params]) -> Params:
    """The values of a failed config that explain its failure, given the configs known to
    start: those none of them had; else those that differ from the nearest of them."""
    uncleared = {k: v for k, v in params.items() if not any(same_value(s.get(k), v) for s in known)}
    if uncleared or not known:
        return uncleared
    nearest = min(known, key=lambda s: len(_differing(params, s)))
    return _differing(params, nearest)


def _differing(params: Params, other: Params) -> Params:
    return {k: v for k, v in params.items() if k not in other or not same_value(other[k], v)}


def _shared(a: Params, b: Params) -> Params:
    return {k: v for k, v in a.items() if k in b and same_value(b[k], v)}


def _distinct(rules: list[LearnedRule]) -> list[LearnedRule]:
    """One rule per set of values (from the earliest trials), the fewest values first."""
    seen: dict[tuple[tuple[str, str], ...], LearnedRule] = {}
    for rule in sorted(rules, key=lambda r: (len(r.values), r.trials)):
        key = tuple(sorted((k, repr(v)) for k, v in rule.values.items()))
        seen.setdefault(key, rule)
    return list(seen.values())
