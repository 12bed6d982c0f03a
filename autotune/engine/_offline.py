"""Run one offline (batch) trial: `vllm.LLM` generating the workload's prompts as one batch.

The child program (`_offline_main.py`, or `LaunchSettings.offline_command`) runs with the same
guarantees as a server engine, through the same `spawn` of `_supervise.py`: its own process
group under the supervisor `_leader.py` (which ends the group if the tuner dies), `engine.pid`,
its log in the trial folder, teardown of the whole tree with a survivor check, leaked shared
memory removed, and on GPU/NPU hosts a wait until the devices release the tree's memory. While
it runs, the parent watches for a cancel, a fatal line in the log, the start-up and generation
deadlines, and samples the tree's peak memory. Failures are classified from the exit status and
the log, as for a server.
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from autotune.bench import RequestRecord, RequestSpec
from autotune.devices import (
    NPU_SMI_INFO,
    SmiParseError,
    ToolRunner,
    nvidia_reader,
    parse_npu_smi_info,
    run_tool,
)
from autotune.engine._args import env_file_text, to_yaml_text
from autotune.engine._command import OFFLINE_PLACEHOLDERS
from autotune.engine._config import EngineConfig
from autotune.engine._facts import EngineFacts, parse_facts
from autotune.engine._failures import Failure, classify_exit
from autotune.engine._launcher import EngineError, LaunchSettings, engine_env, resolve_env
from autotune.engine._offline_main import READY_MARK
from autotune.engine._options import SERVER_OPTIONS
from autotune.engine._supervise import LogWatch, Spawned, read_log, spawn, substitute
from autotune.vocab import layout
from autotune.vocab.platform import AnyPlatform, Platform
from autotune.vocab.status import TrialStatus

logger = logging.getLogger(__name__)

_PLACEHOLDERS = OFFLINE_PLACEHOLDERS
# Options of vLLM's server front end that `vllm.LLM` does not take (checked against vLLM
# 0.32's EngineArgs and LLM signature; the child checks again with the installed vLLM).
SERVER_ONLY_OPTIONS = SERVER_OPTIONS - {"chat_template", "profiler_config", "reasoning_parser"}


@dataclass(frozen=True)
class OfflineResult:
    """What one offline batch measured.

    `records` are one per prompt, in prompt order, on this host's monotonic clock: sent at the
    start of `generate`, ended when vLLM's engine produced the request's last token (or, where
    vLLM kept no times, when `generate` returned). `token_times` is empty: a batch streams
    nothing, so only the first token's time is known, and only from vLLM's stats.
    """

    startup_s: float  # `vllm.LLM(...)` construction, as the child timed it
    generate_s: float  # the one `generate` call
    records: list[RequestRecord]
    peak_memory_bytes: int | None  # see PeakMemory; None where it cannot be known
    wall_s: float  # spawn to the end of teardown, on the caller's clock
    facts: EngineFacts = field(default_factory=EngineFacts)
    cuda_max_memory_reserved_bytes: int | None = None  # torch's, in the child process only

    @property
    def output_throughput(self) -> float:
        """Output tokens per second of `generate`."""
        tokens = sum(r.output_tokens for r in self.records)
        return tokens / self.generate_s if self.generate_s > 0 else 0.0


def server_only_options(config: EngineConfig) -> list[str]:
    """The options of `config` that only vLLM's server takes (an offline trial refuses them)."""
    return sorted(name for name in config.args if name in SERVER_ONLY_OPTIONS)


def build_offline_command(
    settings: LaunchSettings, config_path: Path, prompts_path: Path, out_path: Path
) -> list[str]:
    """The argv of the child: `offline_command` with `--config`, `--prompts` and `--out`
    appended, or put where the template names `{config}`, `{prompts}` and `{out}`."""
    template = settings.offline_command.replace("{python}", shlex.quote(sys.executable))
    argv = shlex.split(template)
    values = {"{config}": str(config_path), "{prompts}": str(prompts_path), "{out}": str(out_path)}
    if any(ph in template for ph in _PLACEHOLDERS):
        return [substitute(arg, values) for arg in argv]
    flags = ("--config", "{config}"), ("--prompts", "{prompts}"), ("--out", "{out}")
    return argv + [arg for flag, ph in flags for arg in (flag, values[ph])]


def run_offline(
    config: EngineConfig,
    settings: LaunchSettings,
    trial_dir: Path,
    prompts: Sequence[RequestSpec],
    deadline_s: float | None,
    clock: Callable[[], float] = time.monotonic,
) -> OfflineResult:
    """Generate `prompts` in one batch with `config` in an isolated process tree; always torn
    down.

    Start-up (until the child says the engine is ready) is bounded by
    `settings.startup_timeout_s` (kind `startup_timeout`), generation by `deadline_s` seconds
    after that (kind `hang`). Raises EngineError when the options are server-only
    (`invalid_config`), when the child exits non-zero, logs a fatal error, overruns a deadline
    or writes no result; KeyboardInterrupt (Ctrl-C, or `settings.cancel` set) after teardown;
    TeardownError when a process of the tree survives it.
    """
    refused = server_only_options(config)
    if refused:
        reason = f"server-only options are not taken by vllm.LLM: {', '.join(refused)}"
        raise EngineError(Failure(TrialStatus.INVALID_CONFIG, reason))
    paths = _write_inputs(config, settings, trial_dir, prompts)
    argv = build_offline_command(settings, paths.config, paths.prompts, paths.result)
    started = clock()
    with spawn(argv, engine_env(config, settings), paths.log, settings) as spawned:
        run = _Run(spawned, settings, paths, deadline_s, clock, started)
        failure = run.wait()
        if failure is not None:
            spawned.failed = True  # kill at once: a failing vLLM can hang on SIGTERM
    wall_s = clock() - started
    if failure is not None:
        ready_s = run.ready_at - started if run.ready_at is not None else wall_s
        raise EngineError(failure, round(ready_s, 3))
    outcome = _read_result(paths, len(prompts))
    if isinstance(outcome, Failure):
        raise EngineError(outcome)
    return OfflineResult(
        startup_s=float(outcome["startup_s"]),
        generate_s=float(outcome["generate_s"]),
        records=_records(outcome),
        peak_memory_bytes=run.memory.peak,
        wall_s=wall_s,
        facts=parse_facts(read_log(paths.log)),
        cuda_max_memory_reserved_bytes=outcome.get("cuda_max_memory_reserved_bytes"),
    )


@dataclass(frozen=True)
class _Paths:
    config: Path
    prompts: Path
    result: Path
    log: Path


def _write_inputs(
    config: EngineConfig, settings: LaunchSettings, trial_dir: Path, prompts: Sequence[RequestSpec]
) -> _Paths:
    trial_dir.mkdir(parents=True, exist_ok=True)
    paths = _Paths(
        trial_dir / layout.ENGINE_CONFIG,
        trial_dir / layout.PROMPTS,
        trial_dir / layout.OFFLINE_RESULT,
        trial_dir / layout.ENGINE_LOG,
    )
    paths.config.write_text(to_yaml_text(config, serve=False))
    if config.env:
        (trial_dir / layout.ENGINE_ENV).write_text(
            env_file_text(resolve_env(config.env, settings.cores))
        )
    with paths.prompts.open("w", encoding="utf-8") as out:
        for spec in prompts:
            line: dict[str, Any] = {"prompt": spec.prompt, "max_tokens": spec.max_tokens}
            temperature = getattr(spec, "temperature", None)  # a workload that sets one
            if temperature is not None:
                line["temperature"] = temperature
            out.write(json.dumps(line) + "\n")
    paths.result.unlink(missing_ok=True)  # never read an earlier attempt's result
    _set_aside(paths.log)
    return paths


def _set_aside(log: Path) -> None:
    """Keep an earlier attempt's log under another name: its ready and fatal lines must not be
    read as this attempt's (the log is appended to)."""
    if not log.exists():
        return
    n = 1
    while (old := log.with_name(f"{log.stem}.before-{n}{log.suffix}")).exists():
        n += 1
    log.rename(old)


class _Run:
    """Waiting for one child: its exit, a fatal log line, a deadline or a cancel."""

    def __init__(
        self,
        spawned: Spawned,
        settings: LaunchSettings,
        paths: _Paths,
        deadline_s: float | None,
        clock: Callable[[], float],
        started: float,
    ) -> None:
        self.spawned = spawned
        self.process = spawned.process
        self.settings = settings
        self.paths = paths
        self.deadline_s = deadline_s
        self.clock = clock
        self.started = started
        self.watch = LogWatch(paths.log)
        self.memory = PeakMemory(spawned, settings.platform)
        self.ready_at: float | None = None
        self.written_at: float | None = None
        self._seen = 0  # bytes of the log searched for the ready line
        self._pending = b""

    def wait(self) -> Failure | None:
        """None once the child has written its result (and exited, or overstayed its stop
        time: teardown then ends it); else the failure."""
        while True:
            self.settings.check_cancel()
            self.memory.sample()
            if self.ready_at is None:  # a start that fails leaves its queues' segment
                self.spawned.note_shared_memory_while_starting()
            code = self.process.poll()
            if code is not None:
                return self._exited(code)
            if self.paths.result.exists():  # shutting down: its shutdown lines are no failure
                self.written_at = self.written_at or self.clock()
                if self.clock() - self.written_at > self.settings.stop_timeout_s:
                    logger.warning("offline engine did not exit after writing its result")
                    return None
            elif (failure := self._fatal() or self._overdue()) is not None:
                return failure
            time.sleep(self.settings.poll_interval_s)

    def _exited(self, code: int) -> Failure | None:
        log = read_log(self.paths.log)
        if code == 0 and self.paths.result.exists():
            return None
        failure = classify_exit(code, log, TrialStatus.CRASH)
        if code == 0 and failure.kind is TrialStatus.CRASH:
            reason = f"offline run exited without writing {layout.OFFLINE_RESULT}; {failure.reason}"
            return Failure(TrialStatus.CRASH, reason, failure.log_tail)
        return failure

    def _fatal(self) -> Failure | None:
        if self.watch.fatal() is None:
            return None
        self.spawned.note_shared_memory()  # its processes may live a moment more
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=self.settings.fatal_grace_s)  # let it finish its log
        return classify_exit(self.process.poll(), read_log(self.paths.log), TrialStatus.CRASH)

    def _overdue(self) -> Failure | None:
        now = self.clock()
        if self.ready_at is None and self._saw_ready():
            self.ready_at = now
            self.spawned.note_shared_memory()  # vLLM's queues exist once the engine is built
        if self.ready_at is None:
            if now - self.started <= self.settings.startup_timeout_s:
                return None
            reason = f"engine not ready after {self.settings.startup_timeout_s:.0f} s"
            return self._timeout(TrialStatus.STARTUP_TIMEOUT, reason)
        if self.deadline_s is None or now - self.ready_at <= self.deadline_s:
            return None
        reason = f"offline batch not done {self.deadline_s:.0f} s after start-up (deadline)"
        return self._timeout(TrialStatus.HANG, reason)

    def _timeout(self, kind: TrialStatus, reason: str) -> Failure:
        tail = classify_exit(None, read_log(self.paths.log), kind).log_tail
        return Failure(kind, reason, tail)

    def _saw_ready(self) -> bool:
        """Whether the log's new text holds the child's ready line (read incrementally)."""
        try:
            with open(self.paths.log, "rb") as log:
                log.seek(self._seen)
                data = log.read()
        except OSError:
            return False
        self._seen += len(data)
        text = self._pending + data
        self._pending = text[-len(READY_MARK) :]  # a line cut between two reads
        return READY_MARK.encode() in text


class PeakMemory:
    """The peak memory an engine's process tree holds, sampled while it runs.

    On CPU: the largest sum of the tree's resident set sizes seen (the supervisor excluded;
    a page that several processes map, such as vLLM's shared-memory queues, counts in each).
    On cuda / ascend: the largest sum of the device memory nvidia-smi / npu-smi list for the
    tree's pids, asked every `device_every_s` (the tools take a good part of a second); None
    when the tool is missing or fails, or never lists one of them (inside a container whose pid
    namespace differs from the tool's). Peaks between two samples are missed.
    """

    def __init__(
        self,
        spawned: Spawned,
        platform: AnyPlatform,
        *,
        run: ToolRunner = run_tool,
        clock: Callable[[], float] = time.monotonic,
        tree_every_s: float = 1.0,
        device_every_s: float = 2.0,
    ) -> None:
        self.spawned = spawned
        self.platform = platform
        self.run = run
        self.clock = clock
        self.tree_every_s = tree_every_s
        self.device_every_s = device_every_s
        self.peak: int | None = None
        self._procs: list[psutil.Process] = []
        self._tree_at: float | None = None
        self._device_at: float | None = None
        self._tool_works = platform in (Platform.CUDA, Platform.ASCEND)

    def sample(self) -> None:
        now = self.clock()
        if not self._procs or self._tree_at is None or now - self._tree_at >= self.tree_every_s:
            leader = self.spawned.process.pid
            self._procs = [p for p in self.spawned.tree() if p.pid != leader]
            self._tree_at = now
        if self.platform == Platform.CPU:
            self._note(_summed_rss(self._procs))
        elif self._tool_works and (
            self._device_at is None or now - self._device_at >= self.device_every_s
        ):
            self._device_at = now
            self._note(self._device_bytes({p.pid for p in self._procs}))

    def _note(self, total: int | None) -> None:
        if total is not None and (self.peak is None or total > self.peak):
            self.peak = total

    def _device_bytes(self, pids: set[int]) -> int | None:
        try:
            if self.platform == Platform.CUDA:
                listed = nvidia_reader(self.run).apps()
            else:
                listed = parse_npu_smi_info(self.run(list(NPU_SMI_INFO))).processes
        except (OSError, subprocess.SubprocessError, SmiParseError) as err:
            logger.info("no device memory of the offline engine: %s", err)
            self._tool_works = False
            return None
        wanted = frozenset(pids)
        held = [p.used_bytes for p in listed if p.is_one_of(wanted) and p.used_bytes is not None]
        return sum(held) if held else None


def _summed_rss(procs: Sequence[psutil.Process]) -> int | None:
    total, seen = 0, False
    for proc in procs:
        with suppress(psutil.Error):
            total += proc.memory_info().rss
            seen = True
    return total if seen else None


def _read_result(paths: _Paths, expected: int) -> dict[str, Any] | Failure:
    try:
        data = json.loads(paths.result.read_text())
        requests = data["requests"]
        float(data["startup_s"]), float(data["generate_s"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Failure(TrialStatus.BENCHMARK_ERROR, f"unreadable {layout.OFFLINE_RESULT}: {exc}")
    if not isinstance(requests, list) or len(requests) != expected:
        got = len(requests) if isinstance(requests, list) else "no"
        reason = f"{layout.OFFLINE_RESULT} has {got} requests for {expected} prompts"
        return Failure(TrialStatus.BENCHMARK_ERROR, reason)
    return dict(data)


def _records(result: dict[str, Any]) -> list[RequestRecord]:
    start = float(result["generate_start_time"])
    end = float(result["generate_end_time"])
    records = []
    for index, req in enumerate(result["requests"]):
        first = req.get("first_token_time")
        finish = req.get("finish_time")
        records.append(
            RequestRecord(
                index=index,
                send_time=start,
                first_token_time=None if first is None else float(first),
                token_times=(),
                end_time=end if finish is None else float(finish),
                prompt_tokens=int(req["prompt_tokens"]),
                output_tokens=int(req["output_tokens"]),
            )
        )
    return records
