"""The pre-launch gate: may a proposed config be launched? Decided at no device cost.

A pure function of what it is given (the proposal, the known OOMs and fits, a measured twin,
the device's room): it returns a `Verdict` and records nothing; the runner records it.

- `invalid_config`: the config breaks a known constraint (`space.check_constraints`);
- `duplicate`: the same config was measured, or holds a slot and runs now;
- `predicted_unsupported`: it carries every value of a rule learned from deterministic
  failures (`_learned.py`: a value vLLM said is unsupported here, or a crash seen twice);
- `predicted_oom`: it needs at least the memory of a known OOM config (by the memory order of
  the parameters, or by what the two surely allocate), or the memory estimate says it cannot
  fit the device's room for this study (`DeviceRoom`): the most memory the study has found
  free on it, or the most a config of the study that started needed, whichever is more. Never
  what other jobs leave free at the moment, and never a config that needs no more memory than
  one that started (a fit);
- waiting (`SkipRule.BUSY`): it fits that room, but not what other processes leave free now;
  the runner waits for room (`_room.py`), and a wait that runs out is the host's fault
  (`environment`), never the config's OOM;
- else it is launched. The baseline always runs unless it is invalid: a wrong prediction must
  not stop the study, and a failed baseline reruns.

An engine that ran out of memory is the host's, not the config's (`environment_oom`) where a
fit needs at least its memory, or where other processes held part of the room at its launch,
unless the engine says the allocation that failed was no larger than what was free then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from autotune.bench import Summary
from autotune.devices import DeviceMemory
from autotune.engine import EngineConfig, failed_allocation_bytes
from autotune.space import (
    MemoryEstimate,
    ModelInfo,
    SearchSpace,
    allocated_bytes,
    check_constraints,
    comparable,
    dominating_oom,
    estimate_memory,
    needs_at_least,
)
from autotune.study._learned import LearnedRule, Params
from autotune.vocab.platform import Platform
from autotune.vocab.status import TrialStatus

GIB = 2**30
# Other processes hold memory of a device when the study has had this share of its total more
# free than now: below it, what is free moves with the host's own work (page cache, the
# load client), not with another job's engine.
HELD_SHARE = 0.05


class SkipRule(StrEnum):
    """Which rule of the gate kept a proposal from launching (a study's result counts them)."""

    INVALID = "invalid_config"
    DUPLICATE = "duplicate"
    UNSUPPORTED = "predicted_unsupported"
    OOM_ORDER = "predicted_oom by memory order"
    OOM_ESTIMATE = "predicted_oom by estimate"
    BUSY = "waited for memory other processes held"  # recorded `environment`
    WORSE = "predicted_worse"  # the engine model's screening (`_screen.py`)
    INFEASIBLE = "predicted_infeasible"


@dataclass(frozen=True)
class Verdict:
    """What the gate decided: `status` None means launch it; else never launch, why, and by
    which rule."""

    status: TrialStatus | None = None
    reason: str = ""
    rule: SkipRule | None = None
    # The screening's predicted measurement: the sampler is told it (else the worst values).
    predicted: Summary | None = None

    @property
    def launch(self) -> bool:
        return self.status is None


LAUNCH = Verdict()


@dataclass(frozen=True)
class Proposal:
    """A config the sampler proposed, and what is known about it."""

    params: Params
    config: EngineConfig
    baseline: bool = False
    twin: int | None = None  # a measured (or running) trial of the same config
    ooms: Sequence[tuple[int, Params]] = ()  # (number, params) of trials that ran out of memory
    fits: Sequence[tuple[int, Params]] = ()  # (number, params) of trials whose engine started
    rules: Sequence[LearnedRule] = ()  # learned from deterministic failures, most general first


@dataclass(frozen=True)
class DeviceRoom:
    """The memory of a trial's devices: `now`, as read before its launch, and `most_free`,
    the most this study has found free on the device (the high-water of its readings)."""

    now: DeviceMemory
    most_free: int = 0


@dataclass(frozen=True)
class Gate:
    """The rules of one study: its space, model, device count and memory estimate.

    `config_of` gives the engine config of a known OOM's params (to compare what the two
    allocate). `lanes` trials side by side share a CPU host's memory.
    """

    space: SearchSpace
    model_info: ModelInfo | None
    config_of: Callable[[Params], EngineConfig]
    devices: int = 1
    lanes: int = 1

    def check(self, p: Proposal, room: DeviceRoom | None = None) -> Verdict:
        """The verdict on `p`, with `room` what the trial's device has (None: unknown)."""
        problems = check_constraints(
            p.config.args, self.model_info, devices=self.devices, platform=self.space.platform
        )
        if problems:
            return Verdict(TrialStatus.INVALID_CONFIG, "; ".join(problems), SkipRule.INVALID)
        if p.twin is not None and not p.baseline:
            twin = f"same config as trial {p.twin}"
            return Verdict(TrialStatus.DUPLICATE, twin, SkipRule.DUPLICATE)
        if p.baseline:
            return LAUNCH
        reason = self._predicted_unsupported(p)
        if reason is not None:
            return Verdict(TrialStatus.PREDICTED_UNSUPPORTED, reason, SkipRule.UNSUPPORTED)
        verdict = self._predicted_oom(p)
        return verdict or self.memory_verdict(p, room)

    def memory_verdict(self, p: Proposal, room: DeviceRoom | None) -> Verdict:
        """The estimate's verdict on `p` with `room` (the trial's devices; None: unknown,
        launch): `predicted_oom` where it cannot fit the study's room on the device, waiting
        (`SkipRule.BUSY`) where it fits that room but not what is free now."""
        if room is None or self.model_info is None:
            return LAUNCH
        now, most = self._shares(room, p.fits)
        problem = self._memory_problem(p.config, most)
        if problem is not None:
            return Verdict(TrialStatus.PREDICTED_OOM, problem, SkipRule.OOM_ESTIMATE)
        problem = self._memory_problem(p.config, now)
        if problem is None:
            return LAUNCH
        reason = (
            f"other processes hold memory: {now.device} has {_gib(now.available_bytes)} GiB "
            f"free now, of the {_gib(most.available_bytes)} GiB this study has had ({problem})"
        )
        return Verdict(TrialStatus.ENVIRONMENT, reason, SkipRule.BUSY)

    def environment_oom(self, p: Proposal, room: DeviceRoom | None, reason: str = "") -> str | None:
        """Why `p`'s engine ran out of memory through the host, not the config: a config that
        needs at least its memory started in this study, or other processes held part of the
        study's room on the device when it was launched (`room`: as read then). None: the
        config's own, and so where the engine's `reason` names an allocation that failed no
        larger than what the device had free at launch (a limit of the engine's own, which no
        other process's memory caused)."""
        fit = self._known_fit(p)
        if fit is not None:
            return f"trial {fit}, which needs at least its memory, started in this study"
        if room is None:
            return None
        asked = failed_allocation_bytes(reason)
        if asked is not None and asked <= room.now.available_bytes:
            return None
        now, _ = self._shares(room, ())
        seen = self._capped(room, max(room.most_free, room.now.available_bytes))
        held = seen - now.available_bytes
        if held <= HELD_SHARE * now.total_bytes:
            return None
        return (
            f"other processes held {_gib(held)} GiB of the {_gib(seen)} GiB this study has had "
            f"free on {now.device} when it was launched"
        )

    def _predicted_unsupported(self, p: Proposal) -> str | None:
        """Why `p` would fail as earlier trials did: it carries every value of a learned rule."""
        params = self.space.effective(p.params)  # a value left out (`only_if`) is no culprit
        rule = next((r for r in p.rules if r.matches(params)), None)
        if rule is None:
            return None
        values = self.space.describe(rule.values)
        if rule.kind == TrialStatus.CRASH:
            first, second = rule.trials
            how = f"which crashed the same way in trials {first} and {second}"
        elif len(rule.trials) == 2:
            how = "which failed as unsupported in trials {} and {}".format(*rule.trials)
        else:
            how = f"which failed as unsupported in trial {rule.trials[0]}"
        return f"carries {values}, {how}: {rule.reason}"

    def _predicted_oom(self, p: Proposal) -> Verdict | None:
        """Whether `p` would run out of memory as a known OOM config did, and why.

        By the memory order of the parameters (at least as much on every one), or, where the
        KV size is given, by what the two configs surely allocate (the estimate's weights + KV
        + activations): one OOM then rules out every config that allocates more, whichever
        parameter makes up the difference. Never where a config that started needs at least
        its memory: that OOM was the host's.
        """
        if self._known_fit(p) is not None:
            return None
        number = dominating_oom(self.space, p.params, list(p.ooms))
        if number is not None:
            reason = f"needs at least the memory of trial {number}, which ran out of memory"
            return Verdict(TrialStatus.PREDICTED_OOM, reason, SkipRule.OOM_ORDER)
        need = self._allocated(p.config)
        if need is None:
            return None
        for number, oom_params in p.ooms:
            if not comparable(self.space, p.params, oom_params):
                continue
            known = self._allocated(self.config_of(oom_params))
            if known is not None and need >= known:
                reason = (
                    f"allocates at least the memory of trial {number}, which ran out of memory "
                    f"({need / 2**30:.2f} >= {known / 2**30:.2f} GiB by the estimate)"
                )
                return Verdict(TrialStatus.PREDICTED_OOM, reason, SkipRule.OOM_ESTIMATE)
        return None

    def _allocated(self, config: EngineConfig) -> int | None:
        return allocated_bytes(
            config.args, self.model_info, local_model(config), self.space.platform
        )

    def _known_fit(self, p: Proposal) -> int | None:
        """A trial whose engine started with at least `p`'s memory on every parameter: the
        evidence that `p` fits beats any prediction (an OOM it dominates was the host's)."""
        return next((n for n, f in p.fits if needs_at_least(self.space, f, p.params)), None)

    def _shares(
        self, room: DeviceRoom, fits: Sequence[tuple[int, Params]]
    ) -> tuple[DeviceMemory, DeviceMemory]:
        """(what one trial has now, the room it has for this study) on the trial's device:
        the most found free, or the most a fit needed by the estimate (it started), if more.
        `lanes` trials side by side on one CPU host share its memory."""
        now = room.now
        total = self._capped(room, now.total_bytes)
        now = DeviceMemory(now.device, total, self._capped(room, now.available_bytes))
        most = self._capped(room, max(room.most_free, room.now.available_bytes))
        needs = [self._needed(self.config_of(f), now) for _, f in fits]
        return now, DeviceMemory(now.device, total, max([most, *needs]))

    def _capped(self, room: DeviceRoom, n: int) -> int:
        if self.lanes > 1 and room.now.platform == Platform.CPU:
            return min(n, room.now.total_bytes // self.lanes)
        return n

    def _needed(self, config: EngineConfig, memory: DeviceMemory) -> int:
        """What `config` takes from the device by the estimate (0: unknown)."""
        estimate = self._estimate(config, memory)
        return estimate.needed_bytes if estimate is not None else 0

    def _memory_problem(self, config: EngineConfig, memory: DeviceMemory) -> str | None:
        """Why the config cannot fit `memory`, by the pre-launch estimate."""
        estimate = self._estimate(config, memory)
        if estimate is None or estimate.problem is None:
            return None
        return f"estimate: {estimate.problem}"

    def _estimate(self, config: EngineConfig, memory: DeviceMemory) -> MemoryEstimate | None:
        # The device the memory was read from says which of vLLM's checks apply (a space for
        # platform "any" runs on whatever the host has).
        return estimate_memory(
            config.args,
            self.model_info,
            local_model(config),
            memory.platform,
            memory.total_bytes,
            memory.available_bytes,
        )


def local_model(config: EngineConfig) -> Path | None:
    """The model's folder, where it is a local one (the estimate reads its checkpoint): a
    variant's own checkpoint (`model` among the options: a w8a8 one weighs half the bf16)."""
    path = Path(config.args.get("model") or config.model)
    return path if path.is_dir() else None


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"
