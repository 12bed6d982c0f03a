"""The storage check: reachable and writable, and never written to (no table is created)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import sqlalchemy
from sqlalchemy.pool import NullPool

from autotune.doctor._records import Check
from autotune.store import (
    OPTUNA_TABLES,
    StorageError,
    default_storage_url,
    redact,
    sqlite_tables,
    storage_errors,
)

CONNECT_TIMEOUT_S = 3
_NEW_FILE = "pass a new file (--storage sqlite:///DIR/study.db) or an Optuna storage"


def storage_check(storage: str | None, root: Path) -> Check:
    """`storage` (a SQLAlchemy URL), or without one the default SQLite files under `root`."""
    if storage is None:
        default = f"{default_storage_url(root, 'STUDY')} (default)"
        problem = unwritable(root)
        if problem is not None:
            fix = "pass --root DIR (a writable folder) or --storage URL"
            return Check("storage", "fail", f"{default}: {problem}", fix)
        return Check("storage", "ok", f"{default}: {root} writable")
    if storage.startswith("sqlite:///"):
        return _sqlite(storage, Path(storage.removeprefix("sqlite:///")))
    return _server(storage)


def unwritable(folder: Path) -> str | None:
    """Why files cannot be created in `folder` (made first where missing), or None."""
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def _sqlite(url: str, path: Path) -> Check:
    """The folder (SQLite writes its journal there) and the file writable; an existing file
    read-only, to see it is an Optuna storage or empty."""
    problem = unwritable(path.parent)
    if problem is None and path.exists() and not os.access(path, os.R_OK | os.W_OK):
        problem = f"{path} is not writable"
    if problem is not None:
        return Check("storage", "fail", f"{url}: {problem}", "pass a writable --storage")
    if not path.exists():
        return Check("storage", "ok", f"{url}: a new file, its folder writable")
    try:
        tables = sqlite_tables(path)
    except sqlite3.Error as err:
        return Check("storage", "fail", f"{url}: not an SQLite database ({err})", _NEW_FILE)
    if tables and not OPTUNA_TABLES.issubset(tables):
        listed = ", ".join(sorted(tables)[:5])
        return Check("storage", "fail", f"{url}: not an Optuna storage ({listed})", _NEW_FILE)
    return Check("storage", "ok", f"{url}: {'Optuna storage' if tables else 'empty'}, writable")


def _server(url: str) -> Check:
    """Connect and `SELECT 1`, within CONNECT_TIMEOUT_S where the driver takes a timeout."""
    shown = redact(url)
    try:
        with storage_errors(url):
            parsed = sqlalchemy.engine.make_url(url)
            timeout = parsed.get_backend_name() in ("postgresql", "mysql", "mariadb")
            args = {"connect_timeout": CONNECT_TIMEOUT_S} if timeout else {}
            engine = sqlalchemy.create_engine(parsed, connect_args=args, poolclass=NullPool)
    except StorageError as err:
        fix = "pass a SQLAlchemy URL, e.g. postgresql+psycopg://USER@HOST/DB"
        return Check("storage", "fail", _reason(err, shown), fix)
    try:
        with storage_errors(url), engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT 1"))
            optuna = sqlalchemy.inspect(conn).has_table("studies")
    except StorageError as err:
        fix = "start the server or pass --storage sqlite:///DIR/study.db"
        return Check("storage", "fail", f"{shown}: unreachable ({_reason(err, '')})", fix)
    finally:
        engine.dispose()
    found = "Optuna storage" if optuna else "empty: the first study creates Optuna's tables"
    return Check("storage", "ok", f"{shown}: reachable, {found}")


def _reason(err: StorageError, shown: str) -> str:
    """`storage_errors`' one line, without its `storage URL: ` prefix (then `shown`'s)."""
    text = str(err)
    head, sep, reason = text.partition(": ")
    if not (sep and head.startswith("storage ")):
        return text
    return f"{shown}: {reason}" if shown else reason
