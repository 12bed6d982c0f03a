"""The StudyStore contract, run against every backend in conftest.BACKENDS."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune import store as keys
from autotune.store import StorageError, StudyStore, TrialRecord, redact
from autotune.vocab.status import TrialStatus

DIRECTIONS = ["maximize", "minimize", "minimize"]


def _sampler() -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=0)


def _one_line(exc: pytest.ExceptionInfo[StorageError]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_create_or_load_creates_then_loads(store: StudyStore) -> None:
    study, created = store.create_or_load("s1", DIRECTIONS, _sampler())
    assert created
    study.set_user_attr("model", "tiny")

    again, created_again = store.create_or_load("s1", DIRECTIONS, _sampler())
    assert not created_again
    assert again.user_attrs["model"] == "tiny"
    assert [d.name.lower() for d in again.directions] == DIRECTIONS


def test_directions_mismatch_is_an_error(store: StudyStore) -> None:
    store.create_or_load("s1", DIRECTIONS, _sampler())
    with pytest.raises(StorageError, match=r"'s1' exists with objectives") as exc:
        store.create_or_load("s1", ["maximize", "minimize"], _sampler())
    assert "maximize, minimize, minimize" in _one_line(exc)


def test_load_unknown_study_lists_known_names(store: StudyStore) -> None:
    store.create_or_load("beta", DIRECTIONS, _sampler())
    store.create_or_load("alpha", DIRECTIONS, _sampler())
    with pytest.raises(StorageError, match="no study named 'gamma'") as exc:
        store.load("gamma")
    assert "(has: alpha, beta)" in _one_line(exc)
    with pytest.raises(StorageError, match="no study named"):
        store.trials("gamma")


def test_load_in_empty_store_says_none(store: StudyStore) -> None:
    with pytest.raises(StorageError, match=r"\(has: none\)"):
        store.load("x")


def test_studies_lists_names_directions_and_trial_counts(store: StudyStore) -> None:
    study, _ = store.create_or_load("s1", DIRECTIONS, _sampler())
    study.set_user_attr("space", "cpu-quick")
    for _ in range(2):
        study.tell(study.ask(), [1.0, 2.0, 3.0])
    store.create_or_load("s2", ["maximize"], _sampler())

    infos = {info.name: info for info in store.studies()}
    assert set(infos) == {"s1", "s2"}
    assert infos["s1"].n_trials == 2
    assert infos["s1"].directions == DIRECTIONS
    assert infos["s1"].facts.space == "cpu-quick"
    assert infos["s2"].n_trials == 0


def test_trials_read_back_what_was_written(store: StudyStore) -> None:
    study, _ = store.create_or_load("s1", DIRECTIONS, _sampler())
    distributions: dict[str, optuna.distributions.BaseDistribution] = {
        "max_num_seqs": optuna.distributions.IntDistribution(4, 128)
    }

    good = study.ask(distributions)
    good.set_user_attr(keys.STATUS, TrialStatus.OK)
    good.set_user_attr(keys.ROLE, keys.ROLE_BASELINE)
    good.set_user_attr(keys.CONFIG, {"model": "/m", "max_num_seqs": good.params["max_num_seqs"]})
    good.set_user_attr(keys.METRICS, {"output_throughput": 100.0, "p99_ttft_ms": 20.0})
    good.set_user_attr(keys.DEVICE_S, 3.5)
    good.set_constraint("failed", 0.0)
    good.set_constraint("p99_ttft_ms", -0.5)
    study.tell(good, [100.0, 20.0, 5.0])

    slow = study.ask(distributions)
    slow.set_user_attr(keys.STATUS, TrialStatus.OK)
    slow.set_user_attr(keys.METRICS, {"output_throughput": 200.0, "p99_ttft_ms": 90.0})
    slow.set_constraint("failed", 0.0)
    slow.set_constraint("p99_ttft_ms", 0.8)
    study.tell(slow, [200.0, 90.0, 5.0])

    oom = study.ask(distributions)
    oom.set_user_attr(keys.STATUS, "oom")
    oom.set_user_attr(keys.REASON, "CUDA out of memory")
    oom.set_constraint("failed", 1.0)
    study.tell(oom, [0.0, 1e9, 1e9])

    study.ask(distributions)  # left running

    records = store.trials("s1")
    assert all(isinstance(r, TrialRecord) for r in records)
    first, second, third, fourth = records
    assert [r.number for r in records] == [0, 1, 2, 3]

    assert first.state == "complete" and first.status == "ok" and first.role == "baseline"
    assert first.params == {"max_num_seqs": good.params["max_num_seqs"]}
    assert first.config["model"] == "/m"
    assert first.metrics == {"output_throughput": 100.0, "p99_ttft_ms": 20.0}
    assert first.constraints == {"failed": 0.0, "p99_ttft_ms": -0.5}
    assert first.values == [100.0, 20.0, 5.0]
    assert first.device_s == 3.5
    assert first.measured and first.feasible

    assert second.measured and not second.feasible  # misses its SLO

    assert third.status == "oom" and third.reason == "CUDA out of memory"
    assert third.constraints == {"failed": 1.0}
    assert not third.measured and not third.feasible

    assert fourth.state == "running" and fourth.status == "running"
    assert fourth.values is None and not fourth.feasible


def test_study_facts(store: StudyStore) -> None:
    study, _ = store.create_or_load("s1", DIRECTIONS, _sampler())
    study.set_user_attr("slos", {"p99_ttft_ms": 100.0})
    assert store.study_facts("s1").slos == {"p99_ttft_ms": 100.0}
    store.write_study_facts("s1", search="goal")
    assert store.load("s1").user_attrs == {"slos": {"p99_ttft_ms": 100.0}, "search": "goal"}


def test_a_second_store_sees_the_same_study(storage_url: str, store: StudyStore) -> None:
    study, _ = store.create_or_load("s1", DIRECTIONS, _sampler())
    study.tell(study.ask(), [1.0, 2.0, 3.0])
    reader = StudyStore(storage_url, create=False)
    assert [r.values for r in reader.trials("s1")] == [[1.0, 2.0, 3.0]]


# SQLite- and URL-specific failures (no backend parameter).


def test_create_false_on_missing_sqlite_file_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "study.db"
    with pytest.raises(StorageError, match="no study database at") as exc:
        StudyStore(f"sqlite:///{path}", create=False)
    assert str(path) in _one_line(exc)
    assert not path.exists()
    assert not path.parent.exists()


def test_unreachable_postgres_is_one_line_error() -> None:
    url = "postgresql+psycopg://u@127.0.0.1:1/x"
    with pytest.raises(StorageError) as exc:
        StudyStore(url)
    assert _one_line(exc).startswith(f"storage {url}: ")


def test_corrupt_sqlite_file_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "study.db"
    path.write_bytes(b"this is not a database\x00\x01\x02" * 200)
    with pytest.raises(StorageError) as exc:
        StudyStore(f"sqlite:///{path}", create=False).studies()
    assert _one_line(exc).startswith(f"storage sqlite:///{path}: ")


def test_redact_hides_the_password() -> None:
    shown = redact("postgresql+psycopg://user:s3cret@db.example:5432/studies")
    assert "s3cret" not in shown
    assert shown == "postgresql+psycopg://user:***@db.example:5432/studies"
    assert redact("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert redact("not a url") == "not a url"


def test_storage_errors_never_show_the_password() -> None:
    with pytest.raises(StorageError) as exc:
        StudyStore("postgresql+psycopg://u:s3cret@127.0.0.1:1/x")
    assert "s3cret" not in str(exc.value)
    assert "***" in str(exc.value)
