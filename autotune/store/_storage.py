"""The study store: Optuna's storage behind one small repository with one error type."""

from __future__ import annotations

import logging
import sqlite3
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import optuna
import sqlalchemy.exc
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import TrialState

from autotune.store._records import StudyInfo, TrialRecord
from autotune.store._slots import TrialSlots
from autotune.store._study import StudyFacts, write_study
from autotune.vocab.objectives import Direction
from autotune.vocab.status import TrialStatus

logger = logging.getLogger(__name__)

SQLITE_TIMEOUT_S = 30.0  # how long a write waits for a locked SQLite file
HEARTBEAT_S = 10  # a running trial's worker says it is alive this often
GONE = "its tuner stopped (no heartbeat): the next tune of this study runs it again"
STALE_BEATS = 6  # a trial whose worker missed this many heartbeats is taken as dead


@dataclass(frozen=True)
class StoreSettings:
    """How a store waits and beats; resolved by the CLI (`AUTOTUNE_SQLITE_TIMEOUT_S`,
    `AUTOTUNE_HEARTBEAT_S`), never read below it."""

    sqlite_timeout_s: float = SQLITE_TIMEOUT_S  # how long a write waits for a locked file
    heartbeat_s: float = HEARTBEAT_S  # a running trial's worker says it is alive this often


def quiet_heartbeat_warnings() -> None:
    """The heartbeat is Optuna's (database time, so workers' clocks may differ), driven by the
    runner's ask/tell loop rather than `Study.optimize`; Optuna warns about both on every ask.
    Applied on import."""
    warnings.filterwarnings("ignore", message=".*heartbeat_interval.*", category=Warning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed", category=Warning)


quiet_heartbeat_warnings()


class StorageError(Exception):
    """The store cannot be opened or read; the message is one line for the user."""


class NoStudiesError(StorageError):
    """The store is reachable but holds no study at all."""


@contextmanager
def storage_errors(url: str) -> Iterator[None]:
    """Turn database errors into one StorageError (what, where) at one place."""
    try:
        yield
    except StorageError:
        raise
    except ImportError as exc:
        raise StorageError(f"storage {redact(url)}: no database driver for it ({exc})") from exc
    except (
        sqlalchemy.exc.SQLAlchemyError,
        optuna.exceptions.OptunaError,
        OSError,
        ValueError,
        RuntimeError,
    ) as exc:
        detail = str(_root_cause(exc)).strip().splitlines()
        first = detail[0] if detail else type(exc).__name__
        raise StorageError(f"storage {redact(url)}: {first}") from exc


def _root_cause(exc: BaseException) -> BaseException:
    """The database driver's own error under Optuna's and SQLAlchemy's wrappers (Optuna
    reports a locked SQLite file as "invalid data in the commit")."""
    seen: set[int] = set()
    current: BaseException | None = exc
    found: BaseException = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        orig = getattr(current, "orig", None)
        if isinstance(orig, BaseException):
            found = orig
        current = current.__cause__ or current.__context__
    return found


def default_storage_url(root: Path, study: str) -> str:
    """The default store of a study: `ROOT/STUDY/study.db`, beside its trial folders."""
    return f"sqlite:///{(root / study / 'study.db').resolve()}"


def _read_only(url: str, engine_kwargs: dict[str, Any]) -> str:
    """The URL (and, in `engine_kwargs`, the connect arguments) of a connection to `url`
    that cannot write; on other backends than SQLite and PostgreSQL only no table is made."""
    if url.startswith("sqlite:///"):
        # The file the URL names, quoted for SQLite's URI and again for SQLAlchemy's URL
        # parser: each unquotes it once.
        path = sqlalchemy.engine.make_url(url).database or ""
        return f"sqlite:///file:{quote(quote(path))}?mode=ro&uri=true"
    if url.startswith("postgresql"):
        connect = engine_kwargs.setdefault("connect_args", {})
        connect["options"] = "-c default_transaction_read_only=on"
    return url


def _plain_sqlite(url: str, read_only: bool) -> str:
    """A SQLite URL without `?mode=ro`, which the store applies itself where a command opens
    it read-only (`_read_only`); elsewhere it is refused rather than ignored (it used to be,
    and the database was written)."""
    if not url.startswith("sqlite:///") or "?" not in url:
        return url
    parsed = sqlalchemy.engine.make_url(url)
    query = dict(parsed.query)
    if query.pop("mode", None) == "ro" and not read_only:
        raise StorageError(
            f"storage {redact(url)}: ?mode=ro asks for a read-only database, which this "
            "command writes to; drop ?mode=ro (show, export and studies open it read-only "
            "themselves)"
        )
    rest = "&".join(f"{k}={v}" for k, v in query.items())
    return f"sqlite:///{parsed.database or ''}" + (f"?{rest}" if rest else "")


def redact(url: str) -> str:
    """The URL without its password."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return url


# Tables every Optuna storage holds; a database without them holds no study.
OPTUNA_TABLES = frozenset({"studies", "version_info"})


def sqlite_tables(path: Path, timeout_s: float = 5.0) -> set[str]:
    """The tables of SQLite file `path`, read read-only (the file is not changed; no journal
    is made). Raises sqlite3.Error when it is not a SQLite database."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    query = "SELECT name FROM sqlite_master WHERE type = 'table'"
    with closing(sqlite3.connect(uri, uri=True, timeout=timeout_s)) as conn:
        return {str(row[0]) for row in conn.execute(query)}


def _check_sqlite(url: str, path: Path, create: bool, timeout_s: float) -> None:
    """Refuse a SQLite file that is not a study database (read-only: it is not changed). An
    empty file may become one when `create`."""
    try:
        tables = sqlite_tables(path, timeout_s)
    except sqlite3.Error as exc:
        raise StorageError(f"storage {redact(url)}: {exc}") from exc
    if tables >= OPTUNA_TABLES or (create and not tables):
        return
    has = f" (it holds: {', '.join(sorted(tables)[:5])})" if tables else " (it is empty)"
    raise StorageError(
        f"{path} is not a study database{has}; name the study's own file with --storage or --root"
    )


def _check_has_studies(url: str) -> None:
    """Refuse a database server's database that holds no Optuna study tables."""
    with storage_errors(url):
        engine = sqlalchemy.create_engine(url)
        try:
            found = sqlalchemy.inspect(engine).has_table("studies")
        finally:
            engine.dispose()
    if not found:
        raise NoStudiesError(
            f"storage {redact(url)}: no study tables there (no study was made in it)"
        )


class StudyStore:
    """Studies and their trials in one Optuna storage (SQLite file, PostgreSQL, ...)."""

    def __init__(
        self,
        url: str,
        *,
        create: bool = True,
        settings: StoreSettings | None = None,
        read_only: bool = False,
    ) -> None:
        """Open the storage at `url`; with `create=False` a missing SQLite file is an error
        (reading commands never leave an empty database behind). `read_only=True` (implies
        `create=False`): no table is created and the connection cannot write (an SQLite file
        opened read-only, a PostgreSQL session of read-only transactions)."""
        create = create and not read_only
        url = _plain_sqlite(url, read_only)
        self.url = url
        self.settings = settings or StoreSettings()
        # Optuna's RDBStorage creates its tables in whatever it opens, so what is there is
        # checked first: a reading command never writes, a study never goes into another
        # application's SQLite file.
        if url.startswith("sqlite:///"):
            path = Path(url.removeprefix("sqlite:///"))
            if not create and not path.is_file():
                raise StorageError(f"no study database at {path}")
            if path.is_file():
                _check_sqlite(url, path, create, self.settings.sqlite_timeout_s)
            with storage_errors(url):
                path.parent.mkdir(parents=True, exist_ok=True)
        elif not create:
            _check_has_studies(url)
        engine_kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            # Wait out another process's write (a second tuner, `show`) instead of failing.
            engine_kwargs["connect_args"] = {"timeout": self.settings.sqlite_timeout_s}
        self.heartbeat_s = self.settings.heartbeat_s
        self.stale_after_s = max(1, round(self.heartbeat_s * STALE_BEATS))
        with storage_errors(url):
            self.rdb = RDBStorage(
                _read_only(url, engine_kwargs) if read_only else url,
                engine_kwargs=engine_kwargs,
                skip_table_creation=read_only,
                skip_compatibility_check=False,
                heartbeat_interval=max(1, round(self.heartbeat_s)),
                grace_period=self.stale_after_s,
            )
        self.storage: BaseStorage = self.rdb

    def slots(self, study: optuna.Study) -> TrialSlots:
        """The trial budget's slots of `study` (see `TrialSlots`)."""
        with storage_errors(self.url):
            return TrialSlots(self.rdb.engine, study._study_id)

    def stale_trial_ids(self, study: optuna.Study) -> set[int]:
        """Ids of the running trials whose worker has not beaten for `stale_after_s`."""
        with storage_errors(self.url):
            return set(self.rdb._get_stale_trial_ids(study._study_id))

    @contextmanager
    def heartbeat(self, trial_id: int) -> Iterator[None]:
        """Beat for `trial_id` now and every `heartbeat_s` until the block ends. A beat that
        fails (the database is away for a moment) is logged; the next one may succeed."""
        self.rdb.record_heartbeat(trial_id)
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.heartbeat_s):
                try:
                    self.rdb.record_heartbeat(trial_id)
                except Exception as exc:
                    logger.warning("heartbeat of trial id %d failed: %s", trial_id, exc)

        thread = threading.Thread(target=beat, name=f"heartbeat-{trial_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def create_or_load(
        self, name: str, directions: Sequence[str], sampler: optuna.samplers.BaseSampler
    ) -> tuple[optuna.Study, bool]:
        """The study `name`, created with `directions` if new. Returns (study, created)."""
        with storage_errors(self.url):
            existing = {s.study_name for s in self.storage.get_all_studies()}
            created = name not in existing
            study = optuna.create_study(
                storage=self.storage,
                study_name=name,
                directions=[cast(Direction, d) for d in directions],
                sampler=sampler,
                load_if_exists=True,
            )
        if list(study.directions) and [d.name.lower() for d in study.directions] != list(
            directions
        ):
            have = ", ".join(d.name.lower() for d in study.directions)
            raise StorageError(
                f"study {name!r} exists with objectives ({have}); "
                f"it cannot be continued with ({', '.join(directions)})"
            )
        return study, created

    def has(self, name: str) -> bool:
        """Whether study `name` is here (one indexed lookup, not a listing of every study)."""
        with storage_errors(self.url):
            try:
                self.storage.get_study_id_from_name(name)
            except KeyError:
                return False
            return True

    def load(self, name: str) -> optuna.Study:
        if not self.has(name):
            with storage_errors(self.url):
                names = [s.study_name for s in self.storage.get_all_studies()]
            known = ", ".join(sorted(names)) or "none"
            raise StorageError(f"no study named {name!r} in {redact(self.url)} (has: {known})")
        with storage_errors(self.url):
            return optuna.load_study(study_name=name, storage=self.storage)

    def studies(self) -> list[StudyInfo]:
        with storage_errors(self.url):
            return [
                StudyInfo(
                    name=s.study_name,
                    facts=StudyFacts.of(s),
                    directions=[d.name.lower() for d in s.directions],
                    n_trials=self.storage.get_n_trials(
                        self.storage.get_study_id_from_name(s.study_name)
                    ),
                )
                for s in self.storage.get_all_studies()
            ]

    def trials(self, name: str) -> list[TrialRecord]:
        """Every trial of study `name`; a running trial whose worker stopped beating is shown
        as `interrupted` (its tuner is gone: the next `tune` of the study runs it again), not
        as running."""
        study = self.load(name)
        with storage_errors(self.url):
            frozen = study.get_trials(deepcopy=False)
            records = [TrialRecord.from_frozen(t) for t in frozen]
            running = [t for t in frozen if t.state == TrialState.RUNNING]
            if not running:
                return records
            stale = self.stale_trial_ids(study)
        gone = {t.number for t in running if t._trial_id in stale}
        update = {"status": TrialStatus.INTERRUPTED, "reason": GONE}
        return [r.model_copy(update=update) if r.number in gone else r for r in records]

    def study_facts(self, name: str) -> StudyFacts:
        """What study `name` keeps about itself (its attributes, typed)."""
        study = self.load(name)
        with storage_errors(self.url):
            return StudyFacts.of(study)

    def write_study_facts(self, name: str, **fields: Any) -> None:
        """Keep `fields` of `StudyFacts` with study `name`, e.g. the confirm step's result."""
        study = self.load(name)
        with storage_errors(self.url):
            write_study(study, **fields)
