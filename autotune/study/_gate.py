"""The pre-launch gate: may a proposed config be launched? Decided at no device cost.

A pure function of what it is given (the proposal, the known OOMs, a measured twin, the
device's memory now): it returns a `Verdict` and records nothing; the runner records it.

- `invalid_config`: the config breaks a known constraint (`space.check_constraints`);
- `duplicate`: the same config was measured, or holds a slot and runs now;
- `predicted_unsupported`: it carries every value of a rule learned from deterministic
  failures (`_learned.py`: a value vLLM said is unsupported here, or a crash seen twice);
- `predicted_oom`: it needs at least the memory of a known OOM config (by the memory order of
  the parameters, or by what the two surely allocate), or the memory estimate says it cannot
  fit the device;
- else it is launched. The baseline always runs unless it is invalid: a wrong prediction must
  not stop the study, and a failed baseline reruns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from autotune.bench import Summary
from autotune.devices import DeviceMemory
from autotune.engine import EngineConfig
from autotune.space import (
    ModelInfo,
    SearchSpace,
    allocated_bytes,
    check_constraints,
    comparable,
    dominating_oom,
    estimate_memory,
)
from autotune.status import TrialStatus
from autotune.study._learned import LearnedRule

Params = dict[str, Any]


class SkipRule(StrEnum):
    """Which rule of the gate kept a proposal from launching (a study's result counts them)."""

    INVALID = "invalid_config"
    DUPLICATE = "duplicate"
    UNSUPPORTED = "predicted_unsupported"
    OOM_ORDER = "predicted_oom by memory order"
    OOM_ESTIMATE = "predicted_oom by estimate"
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
    rules: Sequence[LearnedRule] = ()  # learned from deterministic failures, most general first


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

    def check(self, p: Proposal, memory: DeviceMemory | None = None) -> Verdict:
        """The verdict on `p`, with `memory` what the trial's device has now (None: unknown)."""
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
        return verdict or self.memory_verdict(p.config, memory)

    def memory_verdict(self, config: EngineConfig, memory: DeviceMemory | None) -> Verdict:
        """The estimate's verdict on `config` with `memory` (the trial's devices now; None:
        unknown, launch)."""
        reason = self._memory_problem(config, memory)
        if reason is None:
            return LAUNCH
        return Verdict(TrialStatus.PREDICTED_OOM, reason, SkipRule.OOM_ESTIMATE)

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
        parameter makes up the difference.
        """
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

    def _memory_problem(self, config: EngineConfig, memory: DeviceMemory | None) -> str | None:
        """Why the config cannot fit the device's memory, by the pre-launch estimate."""
        if memory is None or self.model_info is None:
            return None
        if self.lanes > 1 and memory.platform == "cpu":
            # Trials side by side on one host share its memory.
            share = memory.total_bytes // self.lanes
            memory = DeviceMemory(memory.device, share, min(memory.available_bytes, share))
        # The device the memory was read from says which of vLLM's checks apply (a space for
        # platform "any" runs on whatever the host has).
        estimate = estimate_memory(
            config.args,
            self.model_info,
            local_model(config),
            memory.platform,
            memory.total_bytes,
            memory.available_bytes,
        )
        if estimate is None or estimate.problem is None:
            return None
        return f"estimate: {estimate.problem}"


def local_model(config: EngineConfig) -> Path | None:
    """The model's folder, where it is a local one (the estimate reads its checkpoint): a
    variant's own checkpoint (`model` among the options: a w8a8 one weighs half the bf16)."""
    path = Path(config.args.get("model") or config.model)
    return path if path.is_dir() else None
