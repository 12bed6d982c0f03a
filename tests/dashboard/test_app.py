"""The dashboard's WSGI app, called directly (no socket): pages, JSON, errors, downloads."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import optuna
import pytest
from cli.conftest import invoke

from autotune.dashboard import Catalog, DashboardApp
from autotune.dashboard import _data as data

from .conftest import Studies, call, copy_study


def strict_json(text: str) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_pages_render(app: DashboardApp) -> None:
    home = call(app, "/")
    assert home.status == 200 and home.headers["Content-Type"].startswith("text/html")
    for name in ("s1", "s2", "s3"):
        assert f'href="/studies/{name}"' in home.text
    study = call(app, "/studies/s1")
    assert study.status == 200
    for part in ('id="pareto"', 'id="history"', 'id="params"', 'id="importance"',
                 'id="pareto-y"', 'id="view-data"', "Confirm step", "Exported winner",
                 'data-poll="/api/studies/s1/state"', 'src="/static/plotly.min.js"'):  # fmt: skip
        assert part in study.text, part
    trial = call(app, "/studies/s1/trials/1")
    assert trial.status == 200
    for part in ("download YAML", 'id="serve-cmd"', "TTFT", "p99", 'id="ttft"', "Engine log"):
        assert part in trial.text, part
    assert "<body data-poll" not in trial.text  # a finished trial does not poll


def test_a_trial_that_failed_at_start_up(app: DashboardApp) -> None:
    page = call(app, "/studies/s2/trials/0")
    assert page.status == 200
    assert "oom (failed)" in page.text and "CUDA out of memory" in page.text
    assert "not measured" in page.text and "Traceback" not in page.text
    api = strict_json(call(app, "/api/studies/s2/trials/0").text)
    assert api["status"] == "oom" and api["measured"] is False and api["latencies"] == []
    assert api["figures"] == {} and "no per-request records" in api["records_note"]
    assert "CUDA out of memory" in api["log"]  # from engine.log in the trial folder


def test_json_endpoints(app: DashboardApp) -> None:
    listed = strict_json(call(app, "/api/studies").text)
    assert [s["name"] for s in listed["studies"]] == ["s1", "s2", "s3"] and listed["signature"]
    study = strict_json(call(app, "/api/studies/s1").text)
    assert study["row"]["trials"] == 5
    assert study["winner"]["number"] == study["confirm"]["winner"]
    assert set(study["figures"]) == {"pareto", "history", "params", "importance"}
    state = strict_json(call(app, "/api/studies/s1/state").text)
    assert state == {"name": "s1", "trials": 5, "running": 0, "signature": study["signature"]}
    trial = strict_json(call(app, "/api/studies/s1/trials/0").text)
    assert [r["latency"] for r in trial["latencies"]] == ["TTFT", "TPOT", "ITL", "E2E"]
    assert set(trial["figures"]) == {"ttft", "tpot"}
    assert trial["export_yaml"].startswith("# vllm-autotune: study 's1', trial 0 (trial 0)")


def test_unknown_study_and_trial_are_404s_that_say_what_exists(app: DashboardApp) -> None:
    page = call(app, "/studies/nope")
    assert page.status == 404 and "no study named &#x27;nope&#x27;" in page.text
    assert 'href="/studies/s1"' in page.text and 'href="/studies/s3"' in page.text
    api = call(app, "/api/studies/nope")
    assert api.status == 404
    assert strict_json(api.text)["known"] == ["s1", "s2", "s3"]
    assert call(app, "/studies/s1/trials/99").status == 404
    assert "no trial 99" in call(app, "/api/studies/s1/trials/99").text
    assert call(app, "/no/such/page").status == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_only_reads_are_allowed(app: DashboardApp, method: str) -> None:
    reply = call(app, "/api/studies/s1", method)
    assert reply.status == 405 and reply.headers["Allow"] == "GET, HEAD"


def test_head_sends_headers_only(app: DashboardApp) -> None:
    get, head = call(app, "/studies/s1"), call(app, "/studies/s1", "HEAD")
    assert head.status == 200 and head.body == b""
    assert head.headers["Content-Length"] == get.headers["Content-Length"]


def test_a_store_that_fails_is_a_503_page(studies: Studies, tmp_path: Path) -> None:
    root = copy_study(studies, "s1", tmp_path)
    db = root / "s1" / "study.db"
    app = DashboardApp(Catalog(root, storage=f"sqlite:///{db}"))
    assert call(app, "/studies/s1").status == 200
    db.write_bytes(b"this is not a database" * 100)  # the disk went bad under a running dashboard
    for path in ("/", "/studies/s1", "/studies/s1/trials/0"):
        page = call(app, path)
        assert page.status == 503, path
        assert "the study store cannot be read" in page.text and "Traceback" not in page.text
    api = call(app, "/api/studies/s1/state")
    assert api.status == 503 and "cannot be read" in strict_json(api.text)["error"]


def test_an_unexpected_error_is_a_short_500(
    app: DashboardApp, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(data, "study_view", broken)
    with caplog.at_level(logging.ERROR):
        page = call(app, "/studies/s1")
    assert page.status == 500
    assert "failed to render" in page.text
    assert "secret internals" not in page.text and "Traceback" not in page.text
    assert "secret internals" in caplog.text  # logged with its traceback, for the operator


def test_download_yaml_is_exactly_what_export_writes(
    app: DashboardApp, studies: Studies, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for number in (0, 1):
        reply = call(app, f"/studies/s1/trials/{number}/export.yaml")
        assert reply.status == 200
        name = f"s1-trial-{number}.yaml"
        assert reply.headers["Content-Disposition"] == f'attachment; filename="{name}"'
        result = invoke("export", "s1", "--trial", str(number), "--root", studies.root, "-o", name)
        assert result.exit_code == 0, result.output
        assert reply.body == (tmp_path / name).read_bytes()
    assert call(app, "/studies/s1/trials/0/export.env").status == 404  # no env: no file


def test_profile_summary_and_its_files(studies: Studies, tmp_path: Path) -> None:
    root = copy_study(studies, "s1", tmp_path)
    folder = root / "s1" / "profiles" / "trial-0001"
    folder.mkdir(parents=True)
    (folder / "trace.json.gz").write_bytes(b"\x1f\x8b trace bytes")
    summary = {
        "trace": "trace.json.gz",
        "top_ops": [{"name": "aten::mm", "self_ms": 12.5, "share": 0.4}],
        "phases": {"prefill_share": 0.3, "decode_share": 0.7},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", folder / "link.txt")
    app = DashboardApp(Catalog(root))
    page = call(app, "/studies/s1/trials/1")
    assert "aten::mm" in page.text and "decode 70%" in page.text
    assert 'href="/studies/s1/trials/1/profile/trace.json.gz"' in page.text
    trace = call(app, "/studies/s1/trials/1/profile/trace.json.gz")
    assert trace.status == 200 and trace.body == b"\x1f\x8b trace bytes"
    for bad in ("link.txt", "..", "summary.json/..", "%2e%2e"):
        assert call(app, f"/studies/s1/trials/1/profile/{bad}").status == 404, bad
    assert call(app, "/studies/s1/trials/0/profile/trace.json.gz").status == 404
    assert "Profile" not in call(app, "/studies/s1/trials/0").text


def test_optuna_dashboard_mounted_under_optuna(studies: Studies) -> None:
    pytest.importorskip("optuna_dashboard")
    from autotune.dashboard import mount_optuna

    catalog = Catalog(studies.root, study="s1")
    store = catalog.single_storage()
    assert store is not None
    app = DashboardApp(catalog, optuna=mount_optuna(store.storage))
    assert 'href="/optuna/dashboard"' in call(app, "/studies/s1").text
    page = call(app, "/optuna/dashboard")
    assert page.status == 200 and 'src="/optuna/static/bundle.js"' in page.text
    bundle = call(app, "/optuna/static/bundle.js")
    assert 'url_prefix:"/optuna/dashboard"' in bundle.text
    listed = strict_json(call(app, "/optuna/api/studies").text)
    assert [s["study_name"] for s in listed["study_summaries"]] == ["s1"]
    assert call(app, "/optuna/api/studies", "POST").status == 405  # it cannot write either
    assert call(app, "/optuna/api/studies/0", "DELETE").status == 405


def test_a_running_trial_without_config(studies: Studies, tmp_path: Path) -> None:
    root = copy_study(studies, "s1", tmp_path)
    storage = f"sqlite:///{root / 's1' / 'study.db'}"
    optuna.load_study(study_name="s1", storage=storage).ask()  # a worker has just asked
    app = DashboardApp(Catalog(root))
    page = call(app, "/studies/s1/trials/5")
    assert page.status == 200 and "no engine config was recorded" in page.text
    assert '<body data-poll="/api/studies/s1/state"' in page.text  # it polls while it runs
    assert "running" in call(app, "/studies/s1").text
    assert call(app, "/studies/s1/trials/5/export.yaml").status == 404  # as export refuses
    assert strict_json(call(app, "/api/studies").text)["studies"][0]["running"] == 1
