"""optuna-dashboard (an optional dependency) mounted under `/optuna/` of our server.

optuna-dashboard 0.21's single-page app assumes it owns the root of its server: its page
loads `/static/bundle.js`, its API client calls `/api/...` and its router lives under
`/dashboard`. Those clash with the tuner's own `/api/` and `/static/`. So the mount serves
its page and bundle with those three prefixes moved under `/optuna` (three literal
replacements, each checked: a release that spells them differently is refused with a clear
message rather than half working), and passes every other request to its WSGI app with
`/optuna` stripped from the path.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from optuna.storages import BaseStorage

PREFIX = "/optuna"
# No brackets: the CLI prints errors as rich markup, where `[dashboard]` would vanish.
INSTALL_HINT = "pip install 'optuna-dashboard>=0.21' (this package's `dashboard` extra)"

# (file, text in it, its replacement): each must occur exactly once.
_PATCHES = (
    ("index.html", 'src="/static/bundle.js"', f'src="{PREFIX}/static/bundle.js"'),
    ("public/bundle.js", 'url_prefix:"/dashboard"', f'url_prefix:"{PREFIX}/dashboard"'),
    (
        "public/bundle.js",
        '(null!=e?e:"")}handleResponse',
        f'(null!=e?e:"{PREFIX}")}}handleResponse',
    ),
)


class OptunaDashboardError(RuntimeError):
    """optuna-dashboard is missing or cannot be mounted; the message says what to do."""


def installed() -> bool:
    return importlib.util.find_spec("optuna_dashboard") is not None


def _patched_assets(package: Path) -> dict[str, bytes]:
    texts: dict[str, str] = {}
    for name, old, new in _PATCHES:
        text = texts.get(name)
        if text is None:
            text = (package / name).read_text(encoding="utf-8")
        if text.count(old) != 1:
            raise OptunaDashboardError(
                f"this optuna-dashboard release cannot be mounted under {PREFIX}/ "
                f"({name} has changed); run `optuna-dashboard STORAGE_URL` beside the tuner instead"
            )
        texts[name] = text.replace(old, new)
    return {name: text.encode() for name, text in texts.items()}


def mount(storage: BaseStorage) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """A WSGI app for paths under `/optuna` that serves optuna-dashboard over `storage`."""
    if not installed():
        raise OptunaDashboardError(f"optuna-dashboard is not installed: {INSTALL_HINT}")
    import optuna_dashboard

    package = Path(optuna_dashboard.__file__).parent
    assets = _patched_assets(package)
    inner = optuna_dashboard.wsgi(storage)
    page, bundle = assets["index.html"], assets["public/bundle.js"]

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "").removeprefix(PREFIX) or "/"
        if path in ("/", "/dashboard") or path.startswith("/dashboard/"):
            return _send(start_response, page, "text/html; charset=utf-8")
        if path == "/static/bundle.js":
            return _send(start_response, bundle, "text/javascript; charset=utf-8")
        inner_environ = {
            **environ,
            "SCRIPT_NAME": environ.get("SCRIPT_NAME", "") + PREFIX,
            "PATH_INFO": path,
        }
        return inner(inner_environ, start_response)

    return app


def _send(start_response: Callable[..., Any], body: bytes, kind: str) -> list[bytes]:
    start_response(
        "200 OK",
        [("Content-Type", kind), ("Content-Length", str(len(body))), ("Cache-Control", "no-store")],
    )
    return [body]
