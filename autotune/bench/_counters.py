"""What the engine itself counted during the measured requests: vLLM's Prometheus counters.

vLLM's OpenAI server exports at `/metrics` (V1: `vllm/v1/metrics/loggers.py` and
`vllm/v1/spec_decode/metrics.py`, vLLM 0.8 to 0.32) counters, one series per engine:

- `vllm:prefix_cache_queries_total`: prompt tokens looked up in the prefix cache;
- `vllm:prefix_cache_hits_total`: of those, tokens found there;
- `vllm:spec_decode_num_drafts_total`, `vllm:spec_decode_num_draft_tokens_total`,
  `vllm:spec_decode_num_accepted_tokens_total`: speculative steps, tokens proposed, tokens
  accepted;
- `vllm:time_to_first_token_seconds` and `vllm:request_time_per_output_token_seconds`
  (histograms: their `_sum` and `_count`): each request's TTFT, from its arrival at the API
  server to its first token, and its decode time / (output tokens - 1), as the engine clocks
  them (`vllm/v1/metrics/stats.py`).

`EngineCounters` reads them once the warm-up is over and again after the last measured request;
the difference (warm-up excluded) gives, per trial (docs/metrics.md):

- `prefix_cache_hit_rate` = hits / queries;
- `spec_acceptance_rate` = accepted / draft tokens;
- `spec_acceptance_length` = 1 + accepted / drafts: tokens a request gains per decode step;
- `engine_mean_ttft_ms`, `engine_mean_tpot_ms`: the engine's own mean TTFT and TPOT over the
  requests. The client's `mean_ttft_ms` less `engine_mean_ttft_ms` is what the HTTP layer and
  the client add; both move together with the host's speed, so their ratio does not.

A rate is None where the engine exports no such counter, or counted nothing (prefix caching off,
no speculation): never 0 for "not measured".
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping

import httpx

from autotune.bench._metrics import Summary

logger = logging.getLogger(__name__)

COUNTERS = {
    "prefix_cache_queries": "vllm:prefix_cache_queries",
    "prefix_cache_hits": "vllm:prefix_cache_hits",
    "spec_drafts": "vllm:spec_decode_num_drafts",
    "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
    "ttft_seconds": "vllm:time_to_first_token_seconds_sum",
    "ttft_requests": "vllm:time_to_first_token_seconds_count",
    "tpot_seconds": "vllm:request_time_per_output_token_seconds_sum",
    "tpot_requests": "vllm:request_time_per_output_token_seconds_count",
}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")
_BY_METRIC = {metric: key for key, metric in COUNTERS.items()}


def parse_counters(text: str) -> dict[str, float]:
    """The counters of COUNTERS in a Prometheus text exposition, summed over their series
    (engines, models); a counter that is not there is not in the result."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name = match[1].removesuffix("_total")
        key = _BY_METRIC.get(name)
        if key is None or match[1].endswith("_created"):
            continue
        try:
            value = float(match[2])
        except ValueError:
            continue
        if math.isfinite(value):
            found[key] = found.get(key, 0.0) + value
    return found


def rates(counted: Mapping[str, float]) -> dict[str, float | None]:
    """The per-trial rates of a counter difference (see the module docstring)."""

    def ratio(top: str, bottom: str) -> float | None:
        denominator = counted.get(bottom, 0.0)
        return counted.get(top, 0.0) / denominator if denominator > 0 else None

    def ms(top: str, bottom: str) -> float | None:
        seconds = ratio(top, bottom)
        return None if seconds is None else 1000.0 * seconds

    accepted_per_draft = ratio("spec_accepted_tokens", "spec_drafts")
    return {
        "prefix_cache_hit_rate": ratio("prefix_cache_hits", "prefix_cache_queries"),
        "spec_acceptance_rate": ratio("spec_accepted_tokens", "spec_draft_tokens"),
        "spec_acceptance_length": None if accepted_per_draft is None else 1 + accepted_per_draft,
        "engine_mean_ttft_ms": ms("ttft_seconds", "ttft_requests"),
        "engine_mean_tpot_ms": ms("tpot_seconds", "tpot_requests"),
    }


def with_rates(summary: Summary, counted: Mapping[str, float] | None) -> Summary:
    """`summary` with the rates of what the engine counted (unchanged where it counted none)."""
    found = {k: round(v, 4) for k, v in rates(counted or {}).items() if v is not None}
    return summary.model_copy(update=found) if found else summary


class EngineCounters:
    """The engine's counters over the measured requests of one trial (or one `bench` run).

    `start()` (once the warm-up is over; later calls do nothing) and `counted()` (after the
    last measured request) each read `/metrics`; a server without it gives `{}`.
    """

    def __init__(
        self, base_url: str, timeout_s: float = 5.0, get: Callable[..., httpx.Response] = httpx.get
    ) -> None:
        self._url = base_url.rstrip("/").removesuffix("/v1") + "/metrics"
        self._timeout_s = timeout_s
        self._get = get
        self._before: dict[str, float] | None = None
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._before = self._read()

    def counted(self) -> dict[str, float]:
        """What the engine counted since `start()`, by COUNTERS key; {} when unknown."""
        if self._before is None:
            return {}
        after = self._read()
        if after is None:
            return {}
        return {k: after[k] - self._before.get(k, 0.0) for k in after if k in self._before}

    def _read(self) -> dict[str, float] | None:
        try:
            reply = self._get(self._url, timeout=self._timeout_s)
        except httpx.HTTPError as err:
            logger.debug("cannot read %s: %s", self._url, err)
            return None
        if reply.status_code != 200:
            return None
        return parse_counters(reply.text)
