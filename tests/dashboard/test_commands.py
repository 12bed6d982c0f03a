"""`autotune dashboard` and `autotune report`: binding, bad input, the report file, a socket."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from cli.conftest import invoke
from typer.testing import Result

from autotune.dashboard import BindError, Catalog, DashboardApp, check_host, serve

from .conftest import Studies

REPO = Path(__file__).resolve().parents[2]


def one_error_line(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_needs_no_flag(host: str) -> None:
    check_host(host, explicit=False)


def test_other_addresses_need_an_explicit_host() -> None:
    with pytest.raises(
        BindError, match=r"refusing to listen on 0\.0\.0\.0 .* pass --host 0\.0\.0\.0"
    ):
        check_host("0.0.0.0", explicit=False)
    check_host("0.0.0.0", explicit=True)
    with pytest.raises(BindError, match="cannot resolve host"):
        check_host("no-such-host.invalid", explicit=True)


def test_a_host_from_the_environment_is_not_explicit(
    studies: Studies, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOTUNE_DASHBOARD_HOST", "0.0.0.0")
    line = one_error_line(invoke("dashboard", "--root", studies.root))
    assert "refusing to listen on 0.0.0.0" in line and "--host 0.0.0.0" in line


def test_bad_input_is_one_line(studies: Studies, monkeypatch: pytest.MonkeyPatch) -> None:
    line = one_error_line(invoke("dashboard", "--root", studies.root, "--study", "nope"))
    assert line == "error: no study named 'nope' (known: s1, s2, s3)"
    line = one_error_line(invoke("report", "nope", "--root", studies.root))
    assert "no study named 'nope'" in line
    down = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    line = one_error_line(invoke("dashboard", "--storage", down))
    assert "storage postgresql+psycopg://nobody@127.0.0.1:1/none" in line
    line = one_error_line(invoke("dashboard", "--root", studies.root, "--optuna"))
    assert "--optuna needs one storage" in line
    monkeypatch.setattr("autotune.dashboard._optuna.installed", lambda: False)
    line = one_error_line(invoke("dashboard", "--root", studies.root, "--study", "s1", "--optuna"))
    assert "optuna-dashboard is not installed: pip install 'optuna-dashboard>=0.21'" in line


def test_a_port_in_use_is_one_line(studies: Studies) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke("dashboard", "--root", studies.root, "--port", str(port))
    assert f"cannot listen on 127.0.0.1:{port}" in one_error_line(result)


class Refs(HTMLParser):
    """Every src/href attribute of the document's tags (script text is not parsed as tags)."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.scripts += tag == "script"
        self.refs += [v or "" for k, v in attrs if k in ("src", "href")]


def test_report_is_one_self_contained_file(studies: Studies, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = invoke("report", "s1", "--root", studies.root, "-o", out)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    refs = Refs()
    refs.feed(text)
    assert [r for r in refs.refs if not r.startswith(("data:", "#"))] == []  # nothing to fetch
    assert "plotly.js v" in text and 'id="view-data"' in text  # the bundle and data, inlined
    assert "<body data-poll" not in text  # a file does not poll a server
    assert "Exported winner" in text and "Confirm step" in text and 'id="pareto"' in text


@pytest.fixture
def served(studies: Studies) -> Iterator[str]:
    server = serve(DashboardApp(Catalog(studies.root)), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_served_on_a_socket(served: str) -> None:
    assert "s1" in httpx.get(f"{served}/").text
    assert httpx.get(f"{served}/api/studies/s1/state").json()["trials"] == 5
    assert httpx.head(f"{served}/studies/s1").status_code == 200
    assert httpx.post(f"{served}/api/studies/s1", json={}).status_code == 405
    js = httpx.get(f"{served}/static/plotly.min.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")


def test_the_command_serves_until_interrupted(studies: Studies) -> None:
    argv = [sys.executable, "-m", "autotune", "dashboard", "--root", str(studies.root)]
    argv += ["--study", "s1", "--port", "0"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert " at http://127.0.0.1:" in line and line.rstrip().endswith(
            "/studies/s1 (Ctrl-C to stop)"
        )
        url = line.split(" at ", 1)[1].split()[0]
        assert httpx.get(url, timeout=300).status_code == 200  # bounds a hang
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()  # never left behind, even when it does not stop as it should
            proc.communicate()
            raise
    assert proc.returncode == 0 and "dashboard stopped" in err
