"""The dashboard as a WSGI app (read-only: GET and HEAD), and a small threaded server for it.

Every request ends in a page or a JSON answer, never a traceback: an unknown study or trial
is a 404 that lists what exists, a store that cannot be read is a 503 with its one-line
reason, anything else is logged and answered with a short 500.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import socket
import socketserver
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from autotune.dashboard import _data, _pages, _trial
from autotune.dashboard._catalog import Catalog, UnknownStudy
from autotune.dashboard._html import Frame
from autotune.store import StorageError

logger = logging.getLogger(__name__)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
READ_METHODS = ("GET", "HEAD")
OPTUNA_PREFIX = "/optuna"
CHUNK = 1 << 16


class BindError(ValueError):
    """The dashboard may not listen there; the message says why and what to do."""


@dataclass
class Response:
    status: str
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    file: Path | None = None  # streamed instead of `body`


def plotly_js() -> str:
    """The plotly.js bundle that ships inside the plotly Python package (no CDN)."""
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


class DashboardApp:
    """The dashboard's WSGI application over a catalog of studies.

    Pages: `/`, `/studies/NAME`, `/studies/NAME/trials/N` (+ `/export.yaml`, `/export.env`,
    `/profile/FILE`). JSON: `/api/studies`, `/api/studies/NAME`, `/api/studies/NAME/state`,
    `/api/studies/NAME/trials/N`. `optuna`, when given, is mounted under `/optuna/`.
    """

    def __init__(self, catalog: Catalog, optuna: WSGIApp | None = None) -> None:
        self.catalog = catalog
        self.optuna = optuna
        self.frame = Frame(served=True, optuna_url=f"{OPTUNA_PREFIX}/dashboard" if optuna else None)
        self._plotly: bytes | None = None
        self.routes: list[tuple[re.Pattern[str], Callable[..., Response]]] = [
            (re.compile(r"/"), self.studies),
            (re.compile(r"/static/plotly\.min\.js"), self.plotly),
            (re.compile(r"/favicon\.ico"), lambda: Response("204 No Content")),
            (re.compile(r"/api/studies"), self.api_studies),
            (re.compile(r"/api/studies/([^/]+)"), self.api_study),
            (re.compile(r"/api/studies/([^/]+)/state"), self.api_state),
            (re.compile(r"/api/studies/([^/]+)/trials/(\d+)"), self.api_trial),
            (re.compile(r"/studies/([^/]+)"), self.study),
            (re.compile(r"/studies/([^/]+)/trials/(\d+)"), self.trial),
            (re.compile(r"/studies/([^/]+)/trials/(\d+)/export\.(yaml|env)"), self.export),
            (re.compile(r"/studies/([^/]+)/trials/(\d+)/profile/([^/]+)"), self.profile_file),
        ]

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET").upper()
        path = environ.get("PATH_INFO", "") or "/"
        if method not in READ_METHODS:
            response = self._error("405 Method Not Allowed", "the dashboard only reads", path)
            response.headers.append(("Allow", ", ".join(READ_METHODS)))
        elif self.optuna is not None and (
            path == OPTUNA_PREFIX or path.startswith(OPTUNA_PREFIX + "/")
        ):
            return self.optuna(environ, start_response)
        else:
            response = self._respond(path)
        return self._send(response, method, start_response)

    def _respond(self, path: str) -> Response:
        try:
            for pattern, handler in self.routes:
                match = pattern.fullmatch(path.rstrip("/") or "/")
                if match:
                    return handler(*match.groups())
            return self._error("404 Not Found", f"no page at {path}", path)
        except UnknownStudy as exc:
            return self._error("404 Not Found", str(exc), path, exc.known)
        except _trial.UnknownTrial as exc:
            return self._error("404 Not Found", str(exc), path)
        except StorageError as exc:
            logger.warning("store unreadable for %s: %s", path, exc)
            return self._error(
                "503 Service Unavailable", f"the study store cannot be read: {exc}", path
            )
        except Exception:
            logger.exception("dashboard request %s failed", path)
            return self._error(
                "500 Internal Server Error",
                "the dashboard failed to render this page; the tuner's log has the details",
                path,
            )

    def _send(
        self, r: Response, method: str, start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        size = r.file.stat().st_size if r.file is not None else len(r.body)
        headers = [
            ("Content-Type", r.content_type),
            ("Content-Length", str(size)),
            ("X-Content-Type-Options", "nosniff"),
            *r.headers,
        ]
        if not any(k == "Cache-Control" for k, _ in r.headers):
            headers.append(("Cache-Control", "no-store"))
        start_response(r.status, headers)
        if method == "HEAD":
            return [b""]
        return _chunks(r.file) if r.file is not None else [r.body]

    def _error(self, status: str, message: str, path: str, known: Iterable[str] = ()) -> Response:
        if path.startswith("/api/"):
            payload: dict[str, Any] = {"error": message, "status": int(status.split()[0])}
            if known:
                payload["known"] = list(known)
            return _json(payload, status)
        page = _pages.error_page(self.frame, status, message, list(known))
        return Response(status, page.encode())

    # Pages
    def studies(self) -> Response:
        rows = _data.study_rows(self.catalog)
        sig = _data.studies_signature(rows)
        return _html(_pages.studies_page(self.frame, rows, self.catalog.describe(), sig))

    def study(self, name: str) -> Response:
        return _html(_pages.study_page(_data.study_view(self.catalog, name), self.frame))

    def trial(self, name: str, number: str) -> Response:
        view = _trial.trial_view(self.catalog, name, int(number))
        return _html(_pages.trial_page(view, self.frame))

    def export(self, name: str, number: str, kind: str) -> Response:
        filename, yaml_text, env_text = _trial.export_text(self.catalog, name, int(number))
        if kind == "env":
            if env_text is None:
                return self._error("404 Not Found", "this trial sets no environment", "")
            filename, text = filename.removesuffix(".yaml") + ".env", env_text
        else:
            text = yaml_text
        disposition = ("Content-Disposition", f'attachment; filename="{filename}"')
        return Response("200 OK", text.encode(), "text/plain; charset=utf-8", [disposition])

    def profile_file(self, name: str, number: str, file: str) -> Response:
        path = _trial.profile_download(self.catalog, name, int(number), file)
        if path is None:
            return self._error("404 Not Found", f"no profile file {file!r} for this trial", "")
        disposition = ("Content-Disposition", f'attachment; filename="{quote(path.name)}"')
        return Response(
            "200 OK", content_type="application/octet-stream", headers=[disposition], file=path
        )

    def plotly(self) -> Response:
        if self._plotly is None:
            self._plotly = plotly_js().encode()
        cache = ("Cache-Control", "public, max-age=86400")
        return Response("200 OK", self._plotly, "text/javascript; charset=utf-8", [cache])

    # JSON
    def api_studies(self) -> Response:
        rows = _data.study_rows(self.catalog)
        payload = {
            "studies": [r.jsonable() for r in rows],
            "signature": _data.studies_signature(rows),
        }
        return _json(payload)

    def api_study(self, name: str) -> Response:
        return _json(_data.study_view(self.catalog, name).jsonable())

    def api_state(self, name: str) -> Response:
        return _json(_data.study_state(self.catalog, name).jsonable())

    def api_trial(self, name: str, number: str) -> Response:
        return _json(_trial.trial_view(self.catalog, name, int(number)).jsonable())


def _html(text: str) -> Response:
    return Response("200 OK", text.encode())


def _json(payload: Any, status: str = "200 OK") -> Response:
    body = json.dumps(_data.finite(payload), allow_nan=False).encode()
    return Response(status, body, "application/json")


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as src:
        while chunk := src.read(CHUNK):
            yield chunk


def check_host(host: str, explicit: bool) -> None:
    """Refuse a non-loopback address unless the user named it with `--host`: the dashboard
    has no authentication, so only an explicit choice may expose it (a default or an
    environment variable may not). Raises BindError."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise BindError(f"cannot resolve host {host!r}: {exc}") from exc
    addresses = {str(info[4][0]) for info in infos}
    loopback = all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)
    if not loopback and not explicit:
        raise BindError(
            f"refusing to listen on {host} ({', '.join(sorted(addresses))}): it is not a loopback "
            f"address and the dashboard has no authentication; pass --host {host} explicitly "
            "to expose it"
        )


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        logger.info("%s %s", self.address_string(), format % args)


def serve(app: WSGIApp, host: str, port: int) -> WSGIServer:
    """A threaded server for `app` bound to (host, port), not yet serving; port 0 picks one.
    Raises OSError when the address cannot be bound."""
    server_class = _Server6 if ":" in host else _Server
    return make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
