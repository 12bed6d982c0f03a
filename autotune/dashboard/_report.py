"""`autotune report`: the study page as one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

from autotune.dashboard._catalog import Catalog
from autotune.dashboard._data import study_view
from autotune.dashboard._html import Frame
from autotune.dashboard._pages import study_page
from autotune.dashboard._server import plotly_js


def render_report(catalog: Catalog, name: str) -> str:
    """The study view with plotly.js and every figure inlined: it opens with no network and
    no server (no live refresh, no links to trial pages)."""
    frame = Frame(served=False, plotly_js=plotly_js())
    return study_page(study_view(catalog, name), frame)


def write_report(catalog: Catalog, name: str, out: Path) -> int:
    """Write the report of study `name` to `out`; returns its size in bytes."""
    text = render_report(catalog, name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out.stat().st_size
