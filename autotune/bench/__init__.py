"""Load generation and metrics: workloads, arrival schedules, the streaming client, per-request
records and their aggregation. Metric definitions: docs/metrics.md."""

from autotune.bench._capacity import Capacity, CapacitySearch, find_capacity
from autotune.bench._client import LoadClient, OpenAICompletionsClient, StreamError, run_benchmark
from autotune.bench._guard import Abort, AbortKind, BenchmarkAborted, Guard
from autotune.bench._load import LoadProfile
from autotune.bench._metrics import (
    METRIC_NAMES,
    RATES,
    THROUGHPUTS,
    Stats,
    Summary,
    median_summary,
    percentile,
    spread,
    summarize,
)
from autotune.bench._records import RequestRecord, read_records, write_records
from autotune.bench._requests import build_requests
from autotune.bench._workload import (
    JsonlWorkload,
    RandomWorkload,
    RequestSpec,
    Workload,
    WorkloadError,
    parse_workload,
)

__all__ = [
    "METRIC_NAMES",
    "RATES",
    "THROUGHPUTS",
    "Abort",
    "AbortKind",
    "BenchmarkAborted",
    "Capacity",
    "CapacitySearch",
    "Guard",
    "JsonlWorkload",
    "LoadClient",
    "LoadProfile",
    "OpenAICompletionsClient",
    "RandomWorkload",
    "RequestRecord",
    "RequestSpec",
    "Stats",
    "StreamError",
    "Summary",
    "Workload",
    "WorkloadError",
    "build_requests",
    "find_capacity",
    "median_summary",
    "parse_workload",
    "percentile",
    "read_records",
    "run_benchmark",
    "spread",
    "summarize",
    "write_records",
]
