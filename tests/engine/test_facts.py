"""Facts an engine logs about itself: version and KV-cache capacity."""

from __future__ import annotations

import pytest

from autotune.engine import EngineFacts, parse_facts

CPU_LOG = """\
(APIServer pid=2400) INFO 11-30 08:39:40 [api_server.py:1] vLLM API server version 0.32.0
(EngineCore pid=2463) INFO 11-30 08:39:50 [core.py:93] Initializing a V1 LLM engine (v0.32.0) with config: model='/models/tiny', speculative_config=None, tokenizer='/models/tiny'
(EngineCore pid=2463) INFO 11-30 08:39:57 [kv_cache_utils.py:2327] CPU KV cache size: 65,536 tokens, Maximum concurrency for 1,024 tokens per request: 64.00x
(APIServer pid=2400) INFO 11-30 08:40:01 [api_server.py:1] Starting vLLM API server 0 on http://127.0.0.1:8000
"""  # noqa: E501


def test_cpu_log() -> None:
    facts = parse_facts(CPU_LOG)
    assert facts == EngineFacts(vllm_version="0.32.0", kv_cache_tokens=65536, max_concurrency=64.0)


@pytest.mark.parametrize("device", ["GPU", "NPU"])
def test_accelerator_log(device: str) -> None:
    log = (
        "(EngineCore_DP0 pid=77) INFO 11-30 09:00:00 [core.py:1] Initializing a V1 LLM engine "
        "(v0.11.0rc2.dev5+g1234abc) with config: model='m'\n"
        f"(EngineCore_DP0 pid=77) INFO 11-30 09:00:10 [kv_cache_utils.py:1] {device} KV cache "
        "size: 1,234,567 tokens\n"
        "(EngineCore_DP0 pid=77) INFO 11-30 09:00:10 [kv_cache_utils.py:1] Maximum concurrency "
        "for 32,768 tokens per request: 37.68x\n"
    )
    facts = parse_facts(log)
    assert facts.kv_cache_tokens == 1234567
    assert facts.max_concurrency == pytest.approx(37.68)
    assert facts.vllm_version == "0.11.0rc2.dev5+g1234abc"


def test_api_server_version_alone() -> None:
    log = "(APIServer pid=1) INFO 11-30 08:39:40 [api_server.py:1] vLLM API server version 0.9.2\n"
    assert parse_facts(log).vllm_version == "0.9.2"


def test_restarted_engine_last_match_wins() -> None:
    log = CPU_LOG + CPU_LOG.replace("65,536", "131,072").replace("64.00x", "128.00x")
    facts = parse_facts(log)
    assert facts.kv_cache_tokens == 131072
    assert facts.max_concurrency == 128.0


def test_nothing_logged() -> None:
    assert parse_facts("INFO starting\n") == EngineFacts()
