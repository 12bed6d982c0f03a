"""Load generation and metrics: workloads, arrival schedules, the streaming client, per-request
records and their aggregation. Metric definitions: docs/metrics.md."""

from autotune.bench._capacity import Capacity, CapacitySearch, find_capacity
from autotune.bench._client import (
    LOAD_CLIENTS,
    LoadClient,
    LoadClientError,
    LoadClientName,
    OpenAICompletionsClient,
    StreamError,
)
from autotune.bench._counters import EngineCounters, parse_counters, rates, with_rates
from autotune.bench._guard import AbortCause, AbortKind, BenchmarkAborted, Guard
from autotune.bench._intervals import t_quantile
from autotune.bench._load import LoadProfile, warmup_for
from autotune.bench._metrics import (
    ENGINE_RATES,
    METRIC_NAMES,
    OPTIONAL,
    PER_TOKEN_COSTS,
    RATES,
    THROUGHPUTS,
    Stats,
    Summary,
    median_summary,
    percentile,
    pooled_summary,
    spread,
    summarize,
    with_agreement,
    with_cost,
    with_intervals,
)
from autotune.bench._percentiles import (
    MIN_ABOVE,
    ThinPercentile,
    min_requests,
    percentile_support,
    slo_percentile,
    thin_percentiles,
)
from autotune.bench._precision import Precision, degraded, outlying, sized
from autotune.bench._records import RequestRecord, read_records, write_records
from autotune.bench._requests import build_requests, longest_request
from autotune.bench._run import run_benchmark
from autotune.bench._stall import Stall, StallWatch, Timekeeping, find_stall
from autotune.bench._vllm_bench import (
    VllmBenchClient,
    VllmBenchError,
    check_installed,
    check_workload,
)
from autotune.bench._workload import (
    JsonlWorkload,
    RandomWorkload,
    RequestSpec,
    SharedPrefixWorkload,
    TraceWorkload,
    Workload,
    WorkloadError,
    parse_workload,
)

__all__ = [
    "ENGINE_RATES",
    "LOAD_CLIENTS",
    "METRIC_NAMES",
    "MIN_ABOVE",
    "OPTIONAL",
    "PER_TOKEN_COSTS",
    "RATES",
    "THROUGHPUTS",
    "AbortCause",
    "AbortKind",
    "BenchmarkAborted",
    "Capacity",
    "CapacitySearch",
    "EngineCounters",
    "Guard",
    "JsonlWorkload",
    "LoadClient",
    "LoadClientError",
    "LoadClientName",
    "LoadProfile",
    "OpenAICompletionsClient",
    "Precision",
    "RandomWorkload",
    "RequestRecord",
    "RequestSpec",
    "SharedPrefixWorkload",
    "Stall",
    "StallWatch",
    "Stats",
    "StreamError",
    "Summary",
    "ThinPercentile",
    "Timekeeping",
    "TraceWorkload",
    "VllmBenchClient",
    "VllmBenchError",
    "Workload",
    "WorkloadError",
    "build_requests",
    "check_installed",
    "check_workload",
    "degraded",
    "find_capacity",
    "find_stall",
    "longest_request",
    "median_summary",
    "min_requests",
    "outlying",
    "parse_counters",
    "parse_workload",
    "percentile",
    "percentile_support",
    "pooled_summary",
    "rates",
    "read_records",
    "run_benchmark",
    "sized",
    "slo_percentile",
    "spread",
    "summarize",
    "t_quantile",
    "thin_percentiles",
    "warmup_for",
    "with_agreement",
    "with_cost",
    "with_intervals",
    "with_rates",
    "write_records",
]
