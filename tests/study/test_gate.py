"""The pre-launch gate as a table: each proposal, what is known about it, and the verdict.

The gate is pure (it records nothing and reads nothing but its arguments), so each row is a
whole case: a config, its role, a twin, the known OOMs, the rules learned from deterministic
failures, the configs that started (fits), the device's memory now and the most the study has
had free on it, the mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autotune.devices import DeviceMemory
from autotune.engine import EngineConfig
from autotune.space import ModelInfo, load_space
from autotune.spec import TuneSpec
from autotune.study import Gate, Harness, LearnedRule, Proposal, SkipRule, Verdict
from autotune.study._gate import DeviceRoom, local_model
from autotune.vocab.status import TrialStatus
from study.fakes import KV_SPACE

GIB = 2**30
BASE = {"max_num_seqs": 32, "kv_cache_mib": 1024, "block_size": 128}


@dataclass(frozen=True)
class Case:
    name: str
    params: dict[str, Any] = field(default_factory=dict)  # over BASE
    options: dict[str, Any] = field(default_factory=dict)  # over the engine config's options
    baseline: bool = False
    twin: int | None = None
    ooms: tuple[dict[str, Any], ...] = ()  # params over BASE, numbered from 1
    fits: tuple[dict[str, Any], ...] = ()  # params over BASE, numbered from 11
    rules: tuple[LearnedRule, ...] = ()
    memory_gib: float | None = None  # available now (of 4 GiB); None: unknown
    most_free_gib: float = 0.0  # the most the study has found free on the device
    devices: int = 1
    lanes: int = 1
    status: TrialStatus | None = None  # None: launched
    reason: str = ""  # a part of the verdict's reason
    rule: SkipRule | None = None  # the rule that kept it from launching (None: launched)


K = TrialStatus
FP8_REASON = "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
SEQS_64 = LearnedRule((4,), {"max_num_seqs": 64}, K.UNSUPPORTED, FP8_REASON)
SEQS_64_BLOCK_64 = LearnedRule(
    (5,), {"max_num_seqs": 64, "block_size": 64}, K.UNSUPPORTED, "ValueError: x is not supported"
)
CRASHED_TWICE = LearnedRule((2, 6), {"block_size": 64}, K.CRASH, "RuntimeError: _C::op() boom")

CASES = [
    Case("a fresh config launches"),
    Case(
        "fewer batched tokens than sequences is invalid",
        options={"max_num_batched_tokens": 16, "enable_chunked_prefill": True},
        params={"max_num_seqs": 64},
        status=TrialStatus.INVALID_CONFIG,
        reason="max_num_batched_tokens",
    ),
    Case(
        "tensor parallel over more devices than there are is invalid",
        options={"tensor_parallel_size": 2},
        status=TrialStatus.INVALID_CONFIG,
        reason="tensor_parallel_size",
    ),
    Case(
        "an invalid baseline is still invalid (the runner then stops the study)",
        options={"tensor_parallel_size": 2},
        baseline=True,
        status=TrialStatus.INVALID_CONFIG,
    ),
    Case(
        "a twin makes a duplicate",
        twin=3,
        status=TrialStatus.DUPLICATE,
        reason="same config as trial 3",
    ),
    Case("a baseline with a twin runs again (a failed baseline reruns)", baseline=True, twin=3),
    Case(
        "more memory than a known OOM on every knob is predicted",
        params={"kv_cache_mib": 3072},
        ooms=({"kv_cache_mib": 2048},),
        status=TrialStatus.PREDICTED_OOM,
        reason="needs at least the memory of trial 1",
    ),
    Case(
        "less KV than a known OOM launches",
        params={"kv_cache_mib": 1024},
        ooms=({"kv_cache_mib": 2048},),
    ),
    Case(
        "more KV with fewer sequences is predicted by what both allocate",
        params={"kv_cache_mib": 3072, "max_num_seqs": 16},
        ooms=({"kv_cache_mib": 2048},),
        status=TrialStatus.PREDICTED_OOM,
        reason="by the estimate",
    ),
    Case(
        "the baseline always runs, whatever the OOMs",
        params={"kv_cache_mib": 3072},
        ooms=({"kv_cache_mib": 2048},),
        baseline=True,
    ),
    Case(
        "a KV cache over the device's free memory is predicted by the estimate",
        params={"kv_cache_mib": 2048},
        memory_gib=1.5,
        status=TrialStatus.PREDICTED_OOM,
        reason="estimate: ",
    ),
    Case("the same KV cache fits a device with room", params={"kv_cache_mib": 2048}, memory_gib=3),
    Case(
        "a KV cache over what is free now, within what the study has had free, waits",
        params={"kv_cache_mib": 2048},
        memory_gib=1.5,
        most_free_gib=3,
        status=TrialStatus.ENVIRONMENT,
        reason="other processes hold memory: cpu:node0 has 1.50 GiB free now, of the 3.00 GiB",
    ),
    Case(
        "a KV cache over the most the study has had free is predicted",
        params={"kv_cache_mib": 3584},
        memory_gib=1.5,
        most_free_gib=3,
        status=TrialStatus.PREDICTED_OOM,
        reason="estimate: ",
    ),
    Case(
        "the memory setting of a config that started is never predicted, it waits",
        params={"kv_cache_mib": 2048, "max_num_seqs": 64},
        fits=({"kv_cache_mib": 2048},),
        memory_gib=0.25,
        status=TrialStatus.ENVIRONMENT,
        reason="of the 2.",
    ),
    Case(
        "a config that started with as much memory outweighs a known OOM",
        params={"kv_cache_mib": 2048},
        ooms=({"kv_cache_mib": 1024},),
        fits=({"kv_cache_mib": 2048, "max_num_seqs": 64},),
    ),
    Case(
        "two lanes on one CPU host share its memory",
        params={"kv_cache_mib": 2048},
        memory_gib=3,
        lanes=2,
        status=TrialStatus.PREDICTED_OOM,
        reason="estimate: ",
    ),
    Case(
        "unknown device memory estimates nothing",
        params={"kv_cache_mib": 4096},
        memory_gib=None,
    ),
    Case(
        "a value that failed as unsupported is predicted, naming the trial and its reason",
        params={"max_num_seqs": 64},
        rules=(SEQS_64,),
        status=K.PREDICTED_UNSUPPORTED,
        reason="carries max_num_seqs=64, which failed as unsupported in trial 4: "
        "NotImplementedError: FP8 KV cache",
    ),
    Case(
        "a rule of one value predicts it with any other values",
        params={"max_num_seqs": 64, "kv_cache_mib": 512, "block_size": 64},
        rules=(SEQS_64,),
        status=K.PREDICTED_UNSUPPORTED,
        reason="in trial 4",
    ),
    Case(
        "a proposal without the rule's value launches",
        params={"max_num_seqs": 32},
        rules=(SEQS_64, CRASHED_TWICE),
    ),
    Case(
        "a rule of two values needs both",
        params={"max_num_seqs": 64, "block_size": 128},
        rules=(SEQS_64_BLOCK_64,),
    ),
    Case(
        "a rule of two values predicts a proposal with both",
        params={"max_num_seqs": 64, "block_size": 64},
        rules=(SEQS_64_BLOCK_64,),
        status=K.PREDICTED_UNSUPPORTED,
        reason="carries max_num_seqs=64 block_size=64, which failed as unsupported in trial 5",
    ),
    Case(
        "a crash seen twice the same way is predicted, naming both trials",
        params={"block_size": 64},
        rules=(CRASHED_TWICE,),
        status=K.PREDICTED_UNSUPPORTED,
        reason="carries block_size=64, which crashed the same way in trials 2 and 6",
    ),
    Case(
        "the value must have the rule's type (1 and True are different engine values)",
        params={"max_num_seqs": 16},
        rules=(LearnedRule((4,), {"max_num_seqs": 16.0}, K.UNSUPPORTED, "x requires y"),),
    ),
    Case(
        "the baseline is never predicted unsupported",
        params={"max_num_seqs": 64},
        rules=(SEQS_64,),
        baseline=True,
    ),
    Case(
        "a duplicate is a duplicate before it is predicted",
        params={"max_num_seqs": 64},
        rules=(SEQS_64,),
        twin=4,
        status=K.DUPLICATE,
    ),
    Case(
        "an unsupported value is predicted before a known OOM",
        params={"max_num_seqs": 64, "kv_cache_mib": 3072},
        ooms=({"kv_cache_mib": 2048},),
        rules=(SEQS_64,),
        status=K.PREDICTED_UNSUPPORTED,
    ),
]
# The rule of each skipping verdict, by its status and reason.
for i, c in enumerate(CASES):
    rule = (
        {
            K.INVALID_CONFIG: SkipRule.INVALID,
            K.DUPLICATE: SkipRule.DUPLICATE,
            K.PREDICTED_UNSUPPORTED: SkipRule.UNSUPPORTED,
            K.ENVIRONMENT: SkipRule.BUSY,
        }.get(c.status)
        if c.status is not None
        else None
    )
    if c.status == K.PREDICTED_OOM:
        order = "needs at least the memory" in c.reason
        rule = SkipRule.OOM_ORDER if order else SkipRule.OOM_ESTIMATE
    CASES[i] = Case(**{**c.__dict__, "rule": rule})


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gate(case: Case, tiny_model: Path, tmp_path: Path) -> None:
    file = tmp_path / "kv.yaml"
    file.write_text(KV_SPACE)
    space = load_space(file)
    spec = TuneSpec.model_validate(
        {"study": "g", "model": str(tiny_model), "space": str(file), "root": tmp_path}
    )
    harness = Harness(spec, space, measure=lambda config, trial_dir: None)  # type: ignore[arg-type,return-value]
    gate = Gate(
        space,
        ModelInfo.from_path(spec.model),
        config_of=harness.engine_config,
        devices=case.devices,
        lanes=case.lanes,
    )
    params = {**BASE, **case.params}
    config = harness.engine_config(params)
    config.args.update(case.options)
    ooms = tuple((k + 1, {**BASE, **oom}) for k, oom in enumerate(case.ooms))
    fits = tuple((k + 11, {**BASE, **fit}) for k, fit in enumerate(case.fits))
    room = None
    if case.memory_gib is not None:
        now = DeviceMemory("cpu:node0", 4 * GIB, int(case.memory_gib * GIB))
        room = DeviceRoom(now, int(case.most_free_gib * GIB))
    proposal = Proposal(
        params,
        config,
        baseline=case.baseline,
        twin=case.twin,
        ooms=ooms,
        fits=fits,
        rules=case.rules,
    )

    verdict = gate.check(proposal, room)

    assert verdict.status == case.status, verdict.reason
    assert verdict.launch is (case.status is None)
    assert case.reason in verdict.reason
    assert verdict.rule == case.rule


def test_gate_reads_nothing_and_records_nothing(tiny_model: Path, tmp_path: Path) -> None:
    """The same proposal twice gets the same verdict: the gate keeps no state."""
    file = tmp_path / "kv.yaml"
    file.write_text(KV_SPACE)
    space = load_space(file)
    spec = TuneSpec.model_validate(
        {"study": "g", "model": str(tiny_model), "space": str(file), "root": tmp_path}
    )
    harness = Harness(spec, space, measure=lambda config, trial_dir: None)  # type: ignore[arg-type,return-value]
    gate = Gate(space, ModelInfo.from_path(spec.model), config_of=harness.engine_config)
    params = {**BASE, "kv_cache_mib": 3072}
    proposal = Proposal(
        params, harness.engine_config(params), ooms=((4, {**BASE, "kv_cache_mib": 2048}),)
    )
    first, second = gate.check(proposal), gate.check(proposal)
    assert first == second == Verdict(TrialStatus.PREDICTED_OOM, first.reason, SkipRule.OOM_ORDER)


def test_the_estimate_reads_a_variants_own_checkpoint(tmp_path: Path) -> None:
    """A w8a8 variant sets `model` among the options: its weights are what is loaded, not
    the bf16 checkpoint the study names (half the bytes)."""
    bf16, w8a8 = tmp_path / "bf16", tmp_path / "w8a8"
    bf16.mkdir()
    w8a8.mkdir()
    assert local_model(EngineConfig(model=str(bf16), args={})) == bf16
    assert local_model(EngineConfig(model=str(bf16), args={"model": str(w8a8)})) == w8a8
    assert local_model(EngineConfig(model="org/hub-model", args={})) is None


def test_a_learned_rule_on_a_value_left_out_does_not_skip(tiny_model: Path, tmp_path: Path) -> None:
    """A rule blaming `tokens` (set only with a speculative method) keeps configs with that
    method from launching, not configs without one, whose engine does not see `tokens`."""
    file = tmp_path / "spec.yaml"
    file.write_text(
        "name: s\nplatform: cpu\nfixed: {kv_cache_memory_bytes: 268435456}\nparameters:\n"
        "  - {name: method, option: speculative_config.method, type: categorical,"
        " choices: [null, ngram], baseline: null}\n"
        "  - {name: tokens, option: speculative_config.num_speculative_tokens, type: int,"
        " low: 1, high: 6, baseline: 3, only_if: {method: [ngram]}}\n"
    )
    space = load_space(file)
    spec = TuneSpec.model_validate(
        {"study": "g", "model": str(tiny_model), "space": str(file), "root": tmp_path}
    )
    harness = Harness(spec, space, measure=lambda config, trial_dir: None)  # type: ignore[arg-type,return-value]
    gate = Gate(space, ModelInfo.from_path(spec.model), config_of=harness.engine_config)
    rule = LearnedRule((3,), {"method": "ngram", "tokens": 5}, K.UNSUPPORTED, "boom not supported")
    blamed = {"method": "ngram", "tokens": 5}
    other = {"method": None, "tokens": 5}
    verdict = gate.check(Proposal(blamed, harness.engine_config(blamed), rules=(rule,)))
    assert verdict.status == K.PREDICTED_UNSUPPORTED
    bare = LearnedRule((4,), {"tokens": 5}, K.UNSUPPORTED, "boom not supported")
    assert gate.check(Proposal(other, harness.engine_config(other), rules=(bare,))).status is None
