"""What a running engine says about itself: version and KV-cache capacity.

After its memory profile, a GPU worker (vLLM 0.32, `gpu_worker.py`) and an NPU worker
(vllm-ascend, PR #8289) log the KV-cache size that would replace `gpu_memory_utilization`:
`Replace gpu_memory_utilization ... with `--kv-cache-memory=N` (... GiB) to fit into requested
memory, or `--kv-cache-memory=M` ... to fully utilize gpu memory` (vllm-ascend: `to fit in`,
the first value only). Both are kept: what this config's KV cache can be, measured by the
engine at no extra launch.
"""

from __future__ import annotations

import re

import httpx
from pydantic import BaseModel, Field

_KV_TOKENS = re.compile(r"(?:CPU|GPU|NPU) KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_RESERVED = re.compile(r"reserved_cpus=\[([\d, ]*)\]")
_KV_SUGGESTED = re.compile(r"--kv-cache-memory=(\d+)`[^`]*?to fit in")
_KV_FULL = re.compile(r"--kv-cache-memory=(\d+)`[^`]*?to fully utili[sz]e")
_VERSION = re.compile(r"V1 LLM engine \(v([^)]+)\)|vLLM API server version ([\w.+-]+)")


class EngineFacts(BaseModel):
    """What the engine logged (or `/version` answered) about itself; None: it did not say."""

    vllm_version: str | None = Field(default=None, description="the running vLLM's version")
    kv_cache_tokens: int | None = Field(
        default=None, description="tokens the KV cache holds (`KV cache size: N tokens`)"
    )
    max_concurrency: float | None = Field(
        default=None, description="requests of max_model_len tokens the KV cache holds at once"
    )
    reserved_cpus: list[int] | None = Field(
        default=None, description="CPUs vLLM's CPU backend keeps for its front end"
    )
    kv_cache_memory_suggested: int | None = Field(
        default=None,
        description="bytes of KV cache the worker says fit the requested memory (GPU/NPU)",
    )
    kv_cache_memory_device: int | None = Field(
        default=None, description="bytes of KV cache the worker says fill the device (GPU)"
    )


def parse_facts(log_text: str) -> EngineFacts:
    """Facts from the engine log (the last match wins: a restarted engine logs again)."""
    kv = _KV_TOKENS.findall(log_text)
    conc = _CONCURRENCY.findall(log_text)
    version = _VERSION.findall(log_text)
    reserved = _RESERVED.findall(log_text)
    suggested = _KV_SUGGESTED.findall(log_text)
    full = _KV_FULL.findall(log_text)
    return EngineFacts(
        kv_cache_memory_suggested=int(suggested[-1]) if suggested else None,
        kv_cache_memory_device=int(full[-1]) if full else None,
        reserved_cpus=[int(x) for x in reserved[-1].replace(" ", "").split(",") if x]
        if reserved
        else None,
        vllm_version=next((a or b for a, b in reversed(version)), None),
        kv_cache_tokens=int(kv[-1].replace(",", "")) if kv else None,
        max_concurrency=float(conc[-1][1]) if conc else None,
    )


def read_facts(log_text: str, url: str | None = None) -> EngineFacts:
    """Facts from the log, with the version asked of the server's `/version` when it answers."""
    facts = parse_facts(log_text)
    if url is None:
        return facts
    try:
        version = httpx.get(f"{url}/version", timeout=2.0).json().get("version")
    except (httpx.HTTPError, ValueError, AttributeError):
        return facts
    return facts.model_copy(update={"vllm_version": version or facts.vllm_version})
