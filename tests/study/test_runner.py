"""StudyRunner with a scripted `measure` (no processes): lifecycle, failures, budget, resume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.bench import Summary
from autotune.engine import EngineConfig
from autotune.measure import Measurement
from autotune.space import SearchSpace, load_space
from autotune.store import StudyStore
from autotune.study import (
    Event,
    Harness,
    Machine,
    SkipRule,
    StudyError,
    StudyResult,
    StudyRunner,
    TrialFinished,
    TrialOutcome,
    TrialSkipped,
    TrialStarted,
    Verdict,
)
from autotune.vocab.status import TrialStatus
from study.fakes import (
    KV_SPACE,
    STUDY,
    FakeMeasure,
    Killed,
    MakeSpec,
    Script,
    gone_worker,
    launched,
    records,
    run,
)


def test_trial_zero_is_the_baseline(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    spec = make_spec(trials=3)
    events: list[Event] = []
    result, trials = run(spec, space, measure, events)

    first = trials[0]
    assert first.number == 0 and first.role == "baseline"
    assert first.params == space.baseline_params()
    assert measure.calls[0].args["max_num_seqs"] == 128
    assert measure.calls[0].args["kv_cache_memory_bytes"] == 512 * 2**20
    assert measure.calls[0].args["enforce_eager"] is True
    assert measure.calls[0].model == str(Path(spec.model).resolve())
    assert first.config["max-num-seqs"] == 128
    assert first.config["model"] == str(Path(spec.model).resolve())
    assert first.status == "ok" and first.feasible
    assert [t.role for t in trials[1:]] == ["", ""]
    assert result.measured == 3 and result.failed == 0 and not result.exhausted
    assert measure.dirs[0] == spec.study_dir / "trial-0000"

    facts = StudyStore(spec.storage_url).study_facts(STUDY)
    assert facts.space == "cpu-quick" and facts.model == spec.model
    kinds = [type(e) for e in events]
    assert kinds.count(TrialStarted) == kinds.count(TrialFinished) == 3


def test_budget_counts_launched_trials(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    # Odd calls fail: failed launches count against the budget like measured ones.
    def script(i: int, config: EngineConfig) -> Measurement:
        return measure.ok(config) if i % 2 == 0 else Measurement(status="crash", device_s=1.0)

    measure.script = script
    result, trials = run(make_spec(trials=4), space, measure)
    assert len(measure.calls) == 4
    assert len(launched(trials)) == 4
    assert result.measured == 2 and result.failed == 2
    assert result.trial_numbers == [t.number for t in launched(trials)]


def test_failed_trial_is_recorded_complete_with_worst_values(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    def script(i: int, config: EngineConfig) -> Measurement:
        if i == 1:
            return Measurement(status="oom", reason="CUDA out of memory", device_s=1.5)
        return measure.ok(config)

    measure.script = script
    result, trials = run(make_spec(trials=3), space, measure)

    oom = launched(trials)[1]
    assert oom.state == "complete"  # not FAIL: samplers must learn from it
    assert oom.status == "oom" and oom.reason == "CUDA out of memory"
    assert oom.values == [0.0, 1e9, 1e9]
    assert oom.constraints["failed"] == 1.0
    assert not oom.feasible
    assert len(launched(trials)) == 3  # the study went on
    assert result.failed == 1 and result.measured == 2

    study = optuna.load_study(study_name=STUDY, storage=make_spec().storage_url)
    assert oom.number not in [t.number for t in study.best_trials]


def test_failing_baseline_stops_the_study_after_recording(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    measure.script = lambda i, config: Measurement(status="oom", reason="no memory", device_s=1.0)
    spec = make_spec(trials=3)
    with pytest.raises(StudyError, match=r"baseline trial .* failed: oom: no memory"):
        run(spec, space, measure)
    assert len(measure.calls) == 1
    (only,) = records(spec)
    assert only.role == "baseline" and only.status == "oom" and only.state == "complete"


def test_failed_baseline_is_retried_first_on_resume(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    measure.script = lambda i, config: Measurement(status="oom", reason="no memory", device_s=1.0)
    with pytest.raises(StudyError):
        run(make_spec(trials=3), space, measure)

    # The host was fixed: the next run measures the baseline before anything else.
    measure.script = None
    result, trials = run(make_spec(trials=3), space, measure)
    assert result.trial_numbers == [1, 2]
    assert trials[1].role == "baseline" and trials[1].status == "ok"
    assert trials[1].params == space.baseline_params()
    assert trials[2].role == ""

    # Once measured, it is not run again.
    result, trials = run(make_spec(trials=4), space, measure)
    assert [t.role for t in trials].count("baseline") == 2
    assert trials[-1].role == ""


def test_invalid_config_is_never_launched(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    # Without chunked prefill every max_num_batched_tokens below max_model_len is impossible.
    options = {"enable_chunked_prefill": False, "max_model_len": 2048}
    spec = make_spec(trials=4, engine={"options": options})
    events: list[Event] = []
    result, trials = run(spec, space, measure, events)

    assert all(c.args["max_num_batched_tokens"] >= 2048 for c in measure.calls)
    invalid = [t for t in trials if t.status == "invalid_config"]
    assert invalid, "the random sampler proposes small batch sizes with this seed"
    assert result.skipped == len(invalid)
    for t in invalid:
        assert t.state == "complete" and t.device_s is None and not t.feasible
        assert "max_num_batched_tokens" in t.reason and "max_model_len (2048)" in t.reason
        assert t.config["max-num-batched-tokens"] < 2048
    skipped = [e for e in events if isinstance(e, TrialSkipped)]
    assert [e.number for e in skipped] == [t.number for t in invalid]


def test_an_impossible_baseline_stops_the_study_before_any_launch(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    # The tiny model has 4096 positions: every config, the baseline's too, is impossible.
    spec = make_spec(trials=1, engine={"options": {"max_model_len": 8192}})
    with pytest.raises(StudyError, match=r"baseline.*max_position_embeddings \(4096\)"):
        run(spec, space, measure)
    assert measure.calls == []


def test_skip_limit_ends_a_study_whose_other_configs_are_impossible(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    # Only the baseline satisfies max_num_batched_tokens (100) >= max_num_seqs.
    file = tmp_path / "narrow.yaml"
    file.write_text(
        "name: narrow\nplatform: cpu\n"
        "fixed: {max_num_batched_tokens: 100, kv_cache_memory_bytes: 268435456}\n"
        "parameters:\n"
        "  - {name: max_num_seqs, type: int, low: 100, high: 200, baseline: 100}\n"
    )
    spec = make_spec(trials=3, space=str(file))
    result, trials = run(spec, load_space(file), measure)
    assert result.exhausted
    assert [c.args["max_num_seqs"] for c in measure.calls] == [100]
    invalid = [t for t in trials if t.status == "invalid_config"]
    assert result.skipped == 30 == len(invalid)  # SKIP_LIMIT_FACTOR * trials
    assert "max_num_batched_tokens" in invalid[0].reason


def test_duplicates_are_skipped_until_the_space_is_exhausted(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    file = tmp_path / "two.yaml"
    file.write_text(
        "name: two\nplatform: cpu\n"
        "fixed: {kv_cache_memory_bytes: 268435456}\n"
        "parameters:\n"
        "  - {name: max_num_seqs, type: categorical, choices: [64, 128], baseline: 128}\n"
    )
    space = load_space(file)
    spec = make_spec(trials=3, space=str(file))
    result, trials = run(spec, space, measure)

    assert sorted(c.args["max_num_seqs"] for c in measure.calls) == [64, 128]
    assert result.measured == 2
    assert result.exhausted
    duplicates = [t for t in trials if t.status == "duplicate"]
    assert len(duplicates) == result.skipped == 30
    assert all(t.reason.startswith("same config as trial ") for t in duplicates)


def test_resume_continues_without_a_second_baseline(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    first, _ = run(make_spec(trials=2, sampler="tpe"), space, measure)
    assert first.trial_numbers == [0, 1]

    result, trials = run(make_spec(trials=4, sampler="tpe"), space, measure)
    assert len(result.trial_numbers) == 2 and min(result.trial_numbers) >= 2
    assert len(launched(trials)) == 4
    params = [tuple(sorted(t.params.items())) for t in launched(trials)]
    assert len(set(params)) == 4  # a resumed sampler's repeats are skipped, not re-measured
    assert [t.role for t in trials].count("baseline") == 1
    assert len(measure.calls) == 4

    again, _ = run(make_spec(trials=4, sampler="tpe"), space, measure)
    assert again.trial_numbers == [] and len(measure.calls) == 4  # budget already spent


def test_running_trial_is_marked_interrupted_and_requeued_once(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    spec = make_spec(trials=1)
    run(spec, space, measure)  # the baseline
    study = optuna.load_study(study_name=STUDY, storage=spec.storage_url)
    left = study.ask(space.distributions())  # a tuner killed while this trial ran
    left.set_user_attr("worker", gone_worker())
    params = dict(left.params)

    # The re-queued trial is launched first; the tuner is killed again while it runs.
    def killed(i: int, config: EngineConfig) -> Measurement:
        raise Killed

    measure.script = killed
    with pytest.raises(Killed):
        run(make_spec(trials=2), space, measure)
    trials = records(spec)
    assert trials[left.number].state == "fail"
    assert trials[left.number].status == "interrupted"
    retry = trials[-1]
    assert retry.params == params and retry.state == "running"
    assert measure.calls[-1].args["max_num_seqs"] == params["max_num_seqs"]

    # This time the retried trial is marked interrupted but not queued a third time.
    measure.script = None
    result, trials = run(make_spec(trials=3), space, measure)
    assert trials[retry.number].status == "interrupted"
    assert trials[retry.number].state == "fail"
    study = optuna.load_study(study_name=STUDY, storage=spec.storage_url)
    requeued = [t.number for t in study.trials if t.user_attrs.get("requeued")]
    assert requeued == [retry.number]
    assert not study.get_trials(states=(TrialState.WAITING, TrialState.RUNNING))
    assert len(result.trial_numbers) == 2


def test_interrupted_trial_is_requeued_and_measured(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    spec = make_spec(trials=1)
    run(spec, space, measure)
    study = optuna.load_study(study_name=STUDY, storage=spec.storage_url)
    left = study.ask(space.distributions())
    left.set_user_attr("worker", gone_worker())

    result, trials = run(make_spec(trials=2), space, measure)
    assert trials[left.number].status == "interrupted"
    (retry_number,) = result.trial_numbers
    assert trials[retry_number].params == left.params
    assert trials[retry_number].status == "ok"


def test_keyboard_interrupt_marks_the_trial_and_ends_the_run(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    def script(i: int, config: EngineConfig) -> Measurement:
        if i == 1:
            raise KeyboardInterrupt
        return measure.ok(config)

    measure.script = script
    spec = make_spec(trials=3)
    result, _ = run(spec, space, measure)
    assert result.interrupted and result.measured == 1 and len(measure.calls) == 2
    trials = records(spec)
    assert len(trials) == 2
    assert trials[1].state == "fail" and trials[1].status == "interrupted"
    assert trials[0].status == "ok"


# --- failures that teach: OOM constraint, predicted OOMs, the estimate, repair, recovery ---

OOM_ABOVE_MIB = 2048


def kv_space(tmp_path: Path) -> tuple[SearchSpace, str]:
    file = tmp_path / "kv.yaml"
    file.write_text(KV_SPACE)
    return load_space(file), str(file)


def oom_above(measure: FakeMeasure, mib: int = OOM_ABOVE_MIB) -> Script:
    def script(i: int, config: EngineConfig) -> Measurement:
        if config.args["kv_cache_memory_bytes"] > mib * 2**20:
            return Measurement(status="oom", reason="Available memory on node 0", device_s=1.0)
        return measure.ok(config)

    return script


def test_oom_sets_the_oom_constraint_and_predicts_later_ooms(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    space, file = kv_space(tmp_path)
    measure.script = oom_above(measure)
    result, trials = run(make_spec(trials=10, space=file, seed=3), space, measure)

    ooms = [t for t in trials if t.status == "oom"]
    predicted = [t for t in trials if t.status == "predicted_oom"]
    assert ooms and predicted, "seed 3 proposes large KV sizes more than once"
    for t in ooms + predicted:
        assert t.constraints["oom"] == 1.0 and t.constraints["failed"] == 1.0
        assert t.state == "complete" and t.values == [0.0, 1e9, 1e9]
    assert all(t.constraints["oom"] == 0.0 for t in trials if t.status == "ok")
    for t in predicted:
        assert t.device_s is None  # never launched
        (source,) = [o for o in ooms if f"trial {o.number}," in t.reason]
        assert source.number < t.number
        assert t.params["kv_cache_mib"] >= source.params["kv_cache_mib"]
        if "by the estimate" not in t.reason:  # by the memory order: more on every parameter
            assert t.params["max_num_seqs"] >= source.params["max_num_seqs"]
    assert any("by the estimate" in t.reason for t in predicted)
    # Nothing that allocates as much as a known OOM was launched after it: on the tiny model
    # the KV cache is nearly all of it.
    for later in launched(trials):
        for oom in ooms:
            if later.number > oom.number:
                assert later.params["kv_cache_mib"] <= oom.params["kv_cache_mib"]
    assert result.skipped >= len(predicted)


def test_memory_estimate_skips_configs_that_cannot_fit(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    from autotune.devices import DeviceMemory

    space, file = kv_space(tmp_path)
    spec = make_spec(trials=6, space=file, seed=1)
    # A node with 1.5 GiB available: KV sizes above it cannot be allocated.
    node = DeviceMemory("cpu:node0", total_bytes=4 * 2**30, available_bytes=3 * 2**29)
    result = StudyRunner(
        Harness(spec, space, measure, machine=Machine(device_memory=lambda ids: node)),
        StudyStore(spec.storage_url),
    ).run()
    trials = records(spec)
    estimated = [t for t in trials if t.status == "predicted_oom"]
    assert estimated and all(t.reason.startswith("estimate: ") for t in estimated)
    assert all(t.params["kv_cache_mib"] * 2**20 > 3 * 2**29 - 8 * 2**20 for t in estimated)
    assert all(c.args["kv_cache_memory_bytes"] < 3 * 2**29 for c in measure.calls)
    assert result.measured == 6


def test_repair_retries_an_oom_once_halfway_to_what_fits(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    space, file = kv_space(tmp_path)

    # Only trial 1 is proposed by the sampler into OOM land: script it by call index.
    def script(i: int, config: EngineConfig) -> Measurement:
        if i == 1:
            return Measurement(status="oom", reason="out of memory", device_s=1.0)
        return measure.ok(config)

    measure.script = script
    spec = make_spec(trials=3, space=file, repair=True, seed=5)
    run(spec, space, measure)
    trials = records(spec)
    first_oom = next(t for t in trials if t.status == "oom")
    repaired = trials[first_oom.number + 1]
    assert repaired.role == "repair" and repaired.repair_of == first_oom.number
    assert repaired.status == "ok" and repaired.device_s is not None
    fit, bad = space.baseline_params()["kv_cache_mib"], first_oom.params["kv_cache_mib"]
    if bad > fit:
        assert fit <= repaired.params["kv_cache_mib"] < bad
    else:  # the KV size was already at the known fit: fewer sequences instead
        assert repaired.params["max_num_seqs"] < first_oom.params["max_num_seqs"]
    others = {k: v for k, v in repaired.params.items() if k != "kv_cache_mib"}
    assert others.items() <= first_oom.params.items() or bad <= fit


def test_a_repair_that_runs_out_of_memory_is_not_repaired_again(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    space, file = kv_space(tmp_path)

    def script(i: int, config: EngineConfig) -> Measurement:
        if i in (1, 2):
            return Measurement(status="oom", reason="out of memory", device_s=1.0)
        return measure.ok(config)

    measure.script = script
    spec = make_spec(trials=4, space=file, repair=True, seed=5)
    run(spec, space, measure)
    trials = records(spec)
    repairs = [t for t in trials if t.role == "repair"]
    assert len(repairs) == 1 and repairs[0].status == "oom"


def test_measured_trial_survives_a_tuner_killed_before_recording_it(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    from autotune.bench import RequestRecord, write_records
    from autotune.measure import save_measurement

    def killed_after_measuring(i: int, config: EngineConfig) -> Measurement:
        if i == 1:
            trial_dir = measure.dirs[-1]
            assert (trial_dir / "trial.json").is_file()  # written before the engine starts
            records_ = [
                RequestRecord(
                    index=k,
                    send_time=0.0,
                    first_token_time=0.02,
                    token_times=(0.02, 0.03),
                    end_time=0.03,
                    prompt_tokens=8,
                    output_tokens=2,
                )
                for k in range(4)
            ]
            write_records(trial_dir / "requests.jsonl", records_)
            save_measurement(trial_dir, Measurement(status="ok", device_s=7.0))
            raise Killed
        return measure.ok(config)

    spec = make_spec(trials=3)
    measure.script = killed_after_measuring
    with pytest.raises(Killed):
        run(spec, space, measure)
    (left,) = [t for t in records(spec) if t.state == "running"]

    measure.script = None
    _, trials = run(spec, space, measure)
    saved = trials[left.number]
    assert saved.status == "ok" and saved.state == "complete" and saved.device_s == 7.0
    assert saved.metrics["completed"] == 4 and saved.metrics["output_throughput"] > 0
    assert not [t for t in trials if t.status == "interrupted"]
    assert len(launched(trials)) == 3 and len(measure.calls) == 3  # not measured twice


def test_teardown_failure_stops_the_study_after_recording_the_trial(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    def script(i: int, config: EngineConfig) -> Measurement:
        m = measure.ok(config)
        if i == 1:
            m.teardown_error = "engine processes survived teardown: [4242]"
        return m

    measure.script = script
    spec = make_spec(trials=4)
    with pytest.raises(StudyError, match=r"trial 1 was recorded.*\[4242\].*busy host"):
        run(spec, space, measure)
    assert [t.status for t in records(spec)] == ["ok", "ok"]


def test_estimate_for_a_space_of_any_platform_follows_the_device_it_read(
    make_spec: MakeSpec, measure: FakeMeasure, tmp_path: Path
) -> None:
    from autotune.devices import DeviceMemory

    file = tmp_path / "any.yaml"
    file.write_text(KV_SPACE.replace("platform: cpu", "platform: any"))
    space = load_space(file)
    spec = make_spec(trials=4, space=str(file))
    # GPU rules would refuse every config here (0.92 of 16 GiB is more than the 12 available);
    # CPU rules check only the KV bytes, and every KV size of the space fits.
    node = DeviceMemory("cpu:node0", total_bytes=16 * 2**30, available_bytes=12 * 2**30)
    StudyRunner(
        Harness(spec, space, measure, machine=Machine(device_memory=lambda ids: node)),
        StudyStore(spec.storage_url),
    ).run()
    assert not [t for t in records(spec) if t.status == "predicted_oom"]
    assert len(measure.calls) == 4


def test_a_metric_that_is_not_finite_is_stored_as_null_and_reads_back_as_nan(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    """A percentile of no requests is NaN: stored as null, never as a placeholder number."""
    import math

    def script(i: int, config: EngineConfig) -> Measurement:
        m = measure.ok(config)
        assert m.summary is not None
        itl = m.summary.itl_ms.model_copy(update={"p99": math.nan, "mean": math.inf})
        m.summary = m.summary.model_copy(update={"itl_ms": itl})
        return m

    measure.script = script
    spec = make_spec(trials=1)
    run(spec, space, measure)
    stored = StudyStore(spec.storage_url).load(spec.study).trials[0].user_attrs["metrics"]
    assert stored["p99_itl_ms"] is None and stored["mean_itl_ms"] is None
    assert -1.0 not in stored.values()
    (trial,) = records(spec)
    assert math.isnan(trial.metric("p99_itl_ms")) and math.isnan(trial.metric("mean_itl_ms"))
    assert trial.metric("output_throughput") > 0


def test_each_end_of_a_proposal_counts_where_it_belongs(summary_of: Callable[..., Summary]) -> None:
    """One outcome type: measured, failed, pruned, kept by the gate, settled elsewhere and
    without a slot each land in their own count, and only skips use the skip budget."""
    result = StudyResult("s")
    ok = Measurement(status="ok", summary=summary_of(throughput=100.0), device_s=10.0)
    oom = Measurement(status="oom", device_s=3.0)
    pruned = Measurement(status="pruned", device_s=4.0)
    kept = Verdict(TrialStatus.PREDICTED_OOM, "as trial 2 or more", SkipRule.OOM_ORDER)
    used = [
        result.add(TrialOutcome(1, ok)),
        result.add(TrialOutcome(2, oom)),
        result.add(TrialOutcome(3, pruned)),
        result.add(TrialOutcome(4, verdict=kept)),
        result.add(TrialOutcome(5)),  # settled by another worker meanwhile
        result.add(TrialOutcome(6, no_slot=True)),
    ]
    assert used == [False, False, False, True, True, False]
    assert result.trial_numbers == [1, 2, 3]
    assert (result.measured, result.failed, result.pruned, result.skipped) == (1, 1, 1, 2)
    assert result.skips == {SkipRule.OOM_ORDER: 1} and result.predicted == 1
    assert result.device_s == 17.0 and result.failed_device_s == 3.0
    assert result.ok_device_s == [10.0] and result.pruned_device_s == 4.0
