"""The dashboard writes numbers as people read them: `23,412`, never `2.341e+04`."""

from __future__ import annotations

from autotune.dashboard._charts import history
from autotune.dashboard._html import num
from autotune.store import TrialRecord


def test_num_has_thousands_separators_and_no_exponent() -> None:
    assert num(23412.3) == "23,412" and num(19480.0) == "19,480"
    assert num(12.345) == "12.35" and num(1024) == "1,024"
    assert num(None) == "-" and num(float("inf")) == "-" and num(True) == "true"
    assert num(3.14159, ".1f") == "3.1"  # an explicit format still wins


def test_chart_hover_text_is_readable() -> None:
    rows = [
        TrialRecord(number=n, state="complete", status="ok", metrics={"output_throughput": v})
        for n, v in enumerate([19480.0, 23412.0])
    ]
    figure = history(rows, ("output_throughput", "maximize"))
    texts = " ".join(t for trace in figure["data"] for t in trace.get("text") or [])
    assert "23,412" in texts and "19,480" in texts and "e+04" not in texts
