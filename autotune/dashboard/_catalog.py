"""Where the dashboard finds studies: one storage URL, or every `ROOT/*/study.db`."""

from __future__ import annotations

import threading
from pathlib import Path

from autotune.store import StorageError, StudyInfo, StudyStore, default_storage_url, redact


class UnknownStudy(LookupError):
    """No study of that name; the message lists the known ones."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        listed = ", ".join(known) or "none"
        super().__init__(f"no study named {name!r} (known: {listed})")


class Catalog:
    """The studies a dashboard shows, and the store each lives in.

    - `storage` given: every study in that one database (SQLite file, PostgreSQL, ...);
    - else `study` given: the study's own `ROOT/STUDY/study.db`, as `show` finds it;
    - else: every `ROOT/*/study.db`, looked up again on each listing, so that a study started
      after the dashboard appears.

    `ROOT/STUDY` is also where a study's trial folders and profiles are looked for. Stores are
    opened read-only in spirit: nothing here writes, and a missing SQLite file is an error, not
    a new empty database.
    """

    def __init__(self, root: Path, storage: str | None = None, study: str | None = None) -> None:
        self.root = root
        self.storage = storage
        self.fixed_url = storage or (default_storage_url(root, study) if study else None)
        self._stores: dict[str, StudyStore] = {}
        self._lock = threading.Lock()

    def check(self, study: str | None = None) -> list[StudyInfo]:
        """List the studies once (raises StorageError when the database cannot be read) and,
        when `study` is given, check that it is one of them (UnknownStudy otherwise)."""
        missing = study is not None and not (self.root / study / "study.db").is_file()
        if self.storage is None and study is not None and missing:
            raise UnknownStudy(study, [i.name for i in Catalog(self.root).studies()])
        infos = self.studies()
        if study is not None and study not in {i.name for i in infos}:
            raise UnknownStudy(study, sorted(i.name for i in infos))
        return infos

    def studies(self) -> list[StudyInfo]:
        """Every study the catalog holds, by name."""
        found: dict[str, StudyInfo] = {}
        for url in self._urls():
            for info in self._store(url).studies():
                found.setdefault(info.name, info)
        return [found[name] for name in sorted(found)]

    def store(self, name: str) -> StudyStore:
        """The store that holds study `name` (UnknownStudy if none does)."""
        urls = self._urls()
        own = default_storage_url(self.root, name)  # where `tune --root` puts it: look first
        if own in urls:
            urls = [own, *(u for u in urls if u != own)]
        for url in urls:
            store = self._store(url)
            if store.has(name):
                return store
        raise UnknownStudy(name, [i.name for i in self.studies()])

    def single_storage(self) -> StudyStore | None:
        """The one store every study lives in, when there is exactly one."""
        urls = self._urls()
        return self._store(urls[0]) if len(urls) == 1 else None

    def study_dir(self, name: str) -> Path:
        """`ROOT/STUDY`: the study's trial folders, confirm runs and profiles."""
        return self.root / name

    def describe(self) -> str:
        """Where the studies are read from, without passwords."""
        return redact(self.fixed_url) if self.fixed_url else f"{self.root}/*/study.db"

    def _urls(self) -> list[str]:
        if self.fixed_url is not None:
            return [self.fixed_url]
        if not self.root.is_dir():
            return []
        return [default_storage_url(db.parent.parent, db.parent.name) for db in self._dbs()]

    def _dbs(self) -> list[Path]:
        try:
            return sorted(p for p in self.root.glob("*/study.db") if p.is_file())
        except OSError as exc:
            raise StorageError(f"cannot list {self.root}: {exc}") from exc

    def _store(self, url: str) -> StudyStore:
        with self._lock:
            store = self._stores.get(url)
            if store is None:
                store = StudyStore(url, create=False)
                self._stores[url] = store
            return store
