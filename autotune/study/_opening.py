"""Opening a study: its sampler, a new study's attributes and baseline, the same-experiment
check of a continued one, the warm start from another study, and the spec workers read."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import store as keys
from autotune.answer.selection import pareto_front, study_objectives
from autotune.devices import describe_host
from autotune.search import make_sampler, told_objectives
from autotune.space import SpaceError
from autotune.spec import SpecError, TuneSpec
from autotune.store import (
    StorageError,
    StoreSettings,
    StudyFacts,
    StudyStore,
    default_storage_url,
    redact,
    write_study,
)
from autotune.study._errors import StudyMismatch
from autotune.study._harness import Harness
from autotune.study._host_fit import model_ref
from autotune.study._reingest import check_reingest, reingest
from autotune.study._stages import baseline_attrs, queue_layouts, staged
from autotune.study._trial_file import TrialFolder, used_folders
from autotune.vocab import layout
from autotune.vocab.status import TrialStatus

logger = logging.getLogger(__name__)


def open_study(
    harness: Harness, store: StudyStore, join: bool = False
) -> tuple[optuna.Study, bool]:
    """Create the study of `harness.spec` (attributes, baseline, warm start) or continue it
    (same experiment only); True if it was created. `join`: one of several workers starting
    together; its sampler is seeded apart from theirs."""
    spec = harness.spec
    folders: dict[int, TrialFolder] = {}
    if store.has(spec.study):
        _check_same_search(spec, store.study_facts(spec.study))
    else:
        check_warm_start(harness, store.settings)  # a bad --warm-start creates nothing
        folders = _foreign_folders(harness, store)
    directions = [o.direction for o in told_objectives(spec)]
    sampler = staged(harness, make_sampler(spec))
    study, created = store.create_or_load(spec.study, directions, sampler)
    if created:
        _initialize(harness, store, study, folders)
        if folders:  # the trials re-ingested: its sampler goes on from there, as on resume
            study.sampler = staged(harness, make_sampler(spec, offset=max(folders) + 1))
    else:
        _check_same_experiment(harness, study)
        offset = len(study.get_trials(deepcopy=False))
        if join:
            # Workers that start together must not propose the same configs.
            offset += int(uuid.uuid4().int % 1_000_000)
        study.sampler = staged(harness, make_sampler(spec, offset=offset))
    write_study(study, spec=_shared_spec(spec))
    return study, created


def _foreign_folders(harness: Harness, store: StudyStore) -> dict[int, TrialFolder]:
    """A new study's trial folders must not exist yet: ones that do hold another study's
    runs (its database lost, or another storage's study of the same name), and trial 0 of
    this one would write over the only measurements left of theirs. With `--reingest`, the
    folders (number -> folder and record) whose measurements the new study records first."""
    spec = harness.spec
    used = used_folders(spec.study_dir)
    if not used:
        return {}
    if not spec.reingest:
        measured = sum((d / layout.MEASUREMENT).is_file() for d in used.values())
        raise StudyMismatch(
            f"{spec.study_dir} holds {len(used)} trial folders ({measured} with a measurement) "
            f"of a study that {redact(store.url)} does not know (was its database lost?): a new "
            f"study {spec.study!r} would write over them; add --reingest to record their "
            "measurements in it first, move the folder away, or use another --study name"
        )
    return check_reingest(harness, used)


def _shared_spec(spec: TuneSpec) -> dict[str, Any]:
    """The spec that `autotune worker` runs on other machines: paths made absolute."""
    data = spec.shared()
    data["model"] = model_ref(spec.model)
    data["space"] = model_ref(spec.space)  # a space file's path; a shipped name as is
    return data


def baseline_params(harness: Harness) -> dict[str, Any]:
    """Trial 0: the spec's (imported from what the user runs today) or the space's."""
    spec = harness.spec
    return dict(spec.baseline) if spec.baseline else harness.space.baseline_params()


def _check_same_experiment(harness: Harness, study: optuna.Study) -> None:
    changed = harness.differs_from(StudyFacts.of(study).stored())
    if changed is not None:
        raise StudyMismatch(
            f"study {harness.spec.study!r} was run with {changed}; its trials would not be "
            "comparable: give the same settings, or use another --study name"
        )


def _check_same_search(spec: TuneSpec, stored: StudyFacts) -> None:
    """A study continues with the search it was created with (Optuna keeps its objectives);
    a study of an older version, without the attribute, searched every objective."""
    searched = stored.search or ("pareto" if len(stored.objectives) > 1 else spec.search)
    if searched != spec.search:
        raise StudyMismatch(
            f"study {spec.study!r} was run with --search {searched}: continue it with "
            f"--search {searched}, or use another --study name"
        )


def _initialize(
    harness: Harness, store: StudyStore, study: optuna.Study, folders: dict[int, TrialFolder]
) -> None:
    """A new study's attributes, its re-ingested folders, its baseline and warm start."""
    spec = harness.spec
    attrs: dict[str, Any] = {
        **harness.experiment(),
        "served_model_name": spec.api_model_name,
        "platform": harness.space.platform,
        "objectives": [o.model_dump() for o in spec.objectives],
        "search": spec.search,  # checked on resume by _check_same_search
        "host": describe_host(),
        "baseline_defaults": harness.baseline_note,  # vLLM's, for this device (or None)
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    write_study(study, **attrs)
    if not (folders and reingest(harness, store, study, folders).baseline):
        study.enqueue_trial(  # (a re-ingested failed baseline has its params: run it again)
            baseline_params(harness),
            user_attrs=baseline_attrs(harness),
            skip_if_exists=not folders,
        )
        queue_layouts(harness, study, baseline_params(harness))  # a MoE study's first stage
    if spec.warm_start:
        _warm_start(harness, store, study, spec.warm_start)


def _warm_start(harness: Harness, store: StudyStore, study: optuna.Study, other: str) -> None:
    """Queue the Pareto configs of study `other` (after the baseline): a new study on the
    same model and hardware starts from what an earlier one found."""
    spec, space = harness.spec, harness.space
    source, facts = _warm_source(harness, store.settings, other)
    if facts.model != model_ref(spec.model):
        logger.warning("--warm-start %s tuned model %s", other, facts.model)
    front = pareto_front(source.trials(other), study_objectives(facts))
    queued = 0
    for trial in front:
        try:
            space.to_engine(trial.params)  # a point of this space, whole
        except SpaceError:
            continue
        origin = {keys.ROLE: keys.ROLE_WARM_START, keys.WARM_FROM: f"{other}#{trial.number}"}
        study.enqueue_trial(trial.params, user_attrs=origin, skip_if_exists=True)
        queued += 1
    logger.info("--warm-start %s: %d of %d Pareto configs queued", other, queued, len(front))


def check_warm_start(harness: Harness, settings: StoreSettings) -> None:
    """Raise SpecError when the spec's `--warm-start` study is not there or searched another
    space (run before the tuning store is opened, so that a bad flag creates nothing)."""
    if harness.spec.warm_start:
        _warm_source(harness, settings, harness.spec.warm_start)


def _warm_source(
    harness: Harness, settings: StoreSettings, other: str
) -> tuple[StudyStore, StudyFacts]:
    """The store and attributes of `--warm-start` study `other`. Raises SpecError (bad
    input: checked before the new study is created) when it is not there or searched another
    space."""
    spec = harness.spec
    url = spec.storage or default_storage_url(spec.root, other)
    try:
        source = StudyStore(url, create=False, settings=settings)
        facts = source.study_facts(other)
    except StorageError as exc:
        raise SpecError(f"--warm-start {other}: {exc}") from None
    if facts.space != harness.space.name:
        raise SpecError(
            f"--warm-start {other}: it searched space {facts.space!r}, not "
            f"{harness.space.name!r}; its configs are not points of this space"
        )
    return source, facts


def retry_failed_baseline(harness: Harness, study: optuna.Study) -> None:
    """A resumed study whose baseline failed runs the baseline again first: without it the
    study would go on with no reference, or on a host that cannot serve the model at all.
    (Called once orphans are settled: an orphaned baseline is queued again there.)"""
    baselines = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE
    ]
    pending = (TrialState.WAITING, TrialState.RUNNING)
    if baselines and not any(
        t.state in pending or t.user_attrs.get(keys.STATUS) == TrialStatus.OK for t in baselines
    ):
        study.enqueue_trial(baseline_params(harness), user_attrs=baseline_attrs(harness))
