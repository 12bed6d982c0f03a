"""The page frame every dashboard page shares: head, style, script, and small HTML helpers.

Pages are plain HTML rendered on the server. Charts are plotly figure dicts in a JSON block
inside `<main>`; the script draws them, follows clicks on trial points, and, on a served page,
polls a JSON endpoint and swaps `<main>` for a fresh copy when the study changed.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.vocab.numbers import readable

POLL_MS = 3000

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222;
background:#fafafa}
header{background:#1f2d3d;color:#fff;padding:10px 20px;display:flex;gap:20px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}
main{padding:16px 20px;max-width:1400px}
h1{font-size:22px;margin:4px 0 8px}h2{font-size:17px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;margin:6px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
.facts td:first-child{font-weight:600;background:#f7f7f7}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:14px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px}
.chart{min-height:320px}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;background:#eee}
.ok{background:#d4f4d4}.bad{background:#f8d7da}.warn{background:#fff3cd}.run{background:#d6e9fb}
.note{color:#666}.error{border-left:4px solid #d62728;padding:8px 12px;background:#fff}
pre{background:#f4f4f4;border:1px solid #ddd;padding:8px;overflow:auto;max-height:480px;
white-space:pre-wrap;word-break:break-all}
code{background:#f4f4f4;padding:1px 4px}
button,.button{font:inherit;padding:4px 10px;border:1px solid #888;border-radius:4px;
background:#fff;cursor:pointer;text-decoration:none;color:#222}
#live{position:fixed;bottom:8px;right:8px;font-size:12px;color:#666}
"""

SCRIPT = """
(function () {
  "use strict";
  var CONFIG = {displaylogo: false, responsive: true};
  function view() {
    var el = document.getElementById("view-data");
    return el ? JSON.parse(el.textContent) : {};
  }
  function draw(id, fig, v) {
    var el = document.getElementById(id);
    if (!el || !fig || typeof Plotly === "undefined") return;
    Plotly.react(el, fig.data, fig.layout, CONFIG).then(function () {
      el.setAttribute("data-drawn", "1");
      if (el.getAttribute("data-click") || !v.trialUrl) return;
      el.setAttribute("data-click", "1");
      el.on("plotly_click", function (ev) {
        var p = ev.points && ev.points[0];
        if (p && p.customdata !== undefined) {
          location.href = v.trialUrl.replace("{n}", String(p.customdata));
        }
      });
    });
  }
  function value(v) { return typeof v === "boolean" ? String(v) : v; }
  function paramFigure(v) {
    var sx = document.getElementById("param-x"), sy = document.getElementById("param-y");
    var fig = v.figures && v.figures.params;
    if (!fig || !sx || !sy) return fig;
    var px = sx.value, py = sy.value, params = v.params || {};
    var data = fig.data.map(function (trace) {
      var keep = (trace.customdata || []).filter(function (n) {
        var p = params[n] || {};
        return px in p && py in p;
      });
      var idx = keep.map(function (n) { return trace.customdata.indexOf(n); });
      return Object.assign({}, trace, {
        customdata: keep,
        text: idx.map(function (i) { return trace.text[i]; }),
        x: keep.map(function (n) { return value(params[n][px]); }),
        y: keep.map(function (n) { return value(params[n][py]); })
      });
    });
    var layout = JSON.parse(JSON.stringify(fig.layout));
    layout.title.text = px + " x " + py + ": outcome";
    layout.xaxis.title.text = px;
    layout.yaxis.title.text = py;
    return {data: data, layout: layout};
  }
  function render() {
    var v = view(), figs = v.figures || {};
    var sel = document.getElementById("pareto-y");
    if (figs.pareto && sel) draw("pareto", figs.pareto[sel.value], v);
    ["history", "importance", "ttft", "tpot"].forEach(function (id) { draw(id, figs[id], v); });
    if (figs.params) draw("params", paramFigure(v), v);
  }
  document.addEventListener("change", function (ev) {
    if (ev.target && ev.target.tagName === "SELECT") render();
  });
  document.addEventListener("click", function (ev) {
    var b = ev.target;
    if (!b || !b.getAttribute || !b.getAttribute("data-copy")) return;
    var text = document.getElementById(b.getAttribute("data-copy")).textContent;
    if (navigator.clipboard) navigator.clipboard.writeText(text);
    b.textContent = "copied";
  });
  function banner(text) {
    var el = document.getElementById("live");
    if (el) el.textContent = text;
  }
  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var fresh = doc.querySelector("main");
    if (!fresh) return;
    var kept = {};
    document.querySelectorAll("main select[id]").forEach(function (s) { kept[s.id] = s.value; });
    document.querySelector("main").replaceWith(fresh);
    Object.keys(kept).forEach(function (id) {
      var s = document.getElementById(id);
      var known = s && Array.prototype.some.call(s.options, function (o) {
        return o.value === kept[id];
      });
      if (known) s.value = kept[id];
    });
    document.body.setAttribute("data-signature", doc.body.getAttribute("data-signature") || "");
    render();
  }
  function poll() {
    var url = document.body.getAttribute("data-poll");
    fetch(url, {cache: "no-store"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    }).then(function (state) {
      banner("live: checked " + new Date().toLocaleTimeString());
      if (state.signature && state.signature !== document.body.getAttribute("data-signature")) {
        return fetch(location.href, {cache: "no-store"}).then(function (r) {
          return r.ok ? r.text().then(swap) : null;
        });
      }
    }).catch(function (e) {
      banner("cannot read the study right now (" + e.message + "); retrying");
    });
  }
  render();
  if (document.body.getAttribute("data-poll")) {
    setInterval(poll, Number(document.body.getAttribute("data-poll-ms")) || 3000);
  }
})();
"""


@dataclass(frozen=True)
class Frame:
    """How pages reach their assets and each other: served (links, polling, plotly.js from
    the dashboard) or a report (plotly.js inlined, no links to pages that do not exist)."""

    served: bool = True
    plotly_js: str = ""  # the bundle itself, for a report
    optuna_url: str | None = None

    def link(self, url: str, text: str) -> str:
        return f'<a href="{esc(url)}">{esc(text)}</a>' if self.served else esc(text)


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def num(value: Any, fmt: str | None = None) -> str:
    """A number for a page: as people read it (`23,412`, `12.35`) unless `fmt` says how."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if not isinstance(value, int | float):
        return esc(value)
    return readable(value) if fmt is None else format(value, fmt)


def script_json(value: Any) -> str:
    """JSON that is safe inside a `<script>` element."""
    text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def inline_js(code: str) -> str:
    """Code that is safe inside a `<script>` element (no closing tag in it)."""
    return code.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """An HTML table of cells that are already HTML (escape them first)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    klass = f' class="{cls}"' if cls else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(cell: str) -> str:
    numeric = cell[:1].isdigit() or (cell[:1] == "-" and cell[1:2].isdigit())
    return f'<td class="num">{cell}</td>' if numeric else f"<td>{cell}</td>"


def facts(pairs: Iterable[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{v}</td></tr>" for k, v in pairs if v)
    return f'<table class="facts">{rows}</table>'


def document(
    frame: Frame,
    title: str,
    main: str,
    *,
    poll: str | None = None,
    signature: str = "",
    data: dict[str, Any] | None = None,
) -> str:
    """A whole page: `main` is HTML; `data` (figures, ...) goes into a JSON block in it."""
    plotly = (
        f"<script>{inline_js(frame.plotly_js)}</script>"
        if not frame.served
        else '<script src="/static/plotly.min.js"></script>'
    )
    block = (
        f'<script type="application/json" id="view-data">{script_json(data)}</script>'
        if data is not None
        else ""
    )
    live = (
        f' data-poll="{esc(poll)}" data-poll-ms="{POLL_MS}" data-signature="{esc(signature)}"'
        if poll and frame.served
        else ""
    )
    nav = (
        '<a href="/">vllm-autotune dashboard</a>'
        if frame.served
        else "<span>vllm-autotune report</span>"
    )
    if frame.optuna_url:
        nav += f'<a href="{esc(frame.optuna_url)}">optuna-dashboard</a>'
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<style>{STYLE}</style>{plotly}</head>"
        f"<body{live}><header>{nav}</header><main>{main}{block}</main>"
        f'<div id="live"></div><script>{inline_js(SCRIPT)}</script></body></html>\n'
    )
