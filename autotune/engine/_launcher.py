"""Launch a vLLM OpenAI server for one trial and tear it down, whatever happens.

The engine runs in a new session (its own process group) on a free loopback port, with its log
in the trial folder. Readiness polls `/health` and notices a dead process at once. Teardown ends
the whole process group, then every recorded descendant, and checks that none survives.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from autotune.engine._args import env_file_text, to_yaml_text
from autotune.engine._config import EngineConfig
from autotune.engine._facts import EngineFacts, read_facts
from autotune.engine._failures import Failure, FailureKind, classify_log
from autotune.engine._ports import free_port

logger = logging.getLogger(__name__)

DEFAULT_COMMAND = "{python} -m vllm.entrypoints.openai.api_server"
_PLACEHOLDERS = ("{config}", "{port}", "{host}")


class EngineError(Exception):
    """An engine failed to start or died; `failure` says how."""

    def __init__(self, failure: Failure, startup_s: float | None = None) -> None:
        super().__init__(f"{failure.kind}: {failure.reason}")
        self.failure = failure
        self.startup_s = startup_s


class TeardownError(Exception):
    """Processes of an engine survived teardown."""


@dataclass(frozen=True)
class LaunchSettings:
    """How engines are started on this host."""

    command: str = DEFAULT_COMMAND
    host: str = "127.0.0.1"
    startup_timeout_s: float = 600.0
    stop_timeout_s: float = 20.0
    poll_interval_s: float = 0.25
    cache_dir: Path | None = None
    cores: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    port_retries: int = 3


@dataclass
class RunningEngine:
    """A ready engine: where to reach it and what it said about itself."""

    url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    startup_s: float
    facts: EngineFacts

    def alive(self) -> bool:
        return self.process.poll() is None

    def failure(self, default: FailureKind = FailureKind.CRASH) -> Failure:
        """Classify why this engine died (read from its log)."""
        return classify_log(_read(self.log_path), default)


def build_command(settings: LaunchSettings, config_path: Path, port: int) -> list[str]:
    """The argv that starts the server: `engine.command` with the config, host and port."""
    template = settings.command.replace("{python}", shlex.quote(sys.executable))
    argv = shlex.split(template)
    values = {"{config}": str(config_path), "{port}": str(port), "{host}": settings.host}
    if any(ph in template for ph in _PLACEHOLDERS):
        return [_substitute(arg, values) for arg in argv]
    return [*argv, "--config", str(config_path), "--host", settings.host, "--port", str(port)]


def _substitute(arg: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        arg = arg.replace(key, value)
    return arg


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
        for name, sub in (("VLLM_CACHE_ROOT", "vllm"), ("TORCHINDUCTOR_CACHE_DIR", "inductor")):
            env[name] = str(cache / sub)
        (cache / "tmp").mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(cache / "tmp")
    env.update(settings.extra_env)
    env.update(resolve_env(config.env, settings.cores))
    return env


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
    return _ranges(cpus)


def _ranges(cpus: list[int]) -> str:
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
    config_path = trial_dir / "engine.yaml"
    config_path.write_text(to_yaml_text(config))
    if config.env:
        env_text = env_file_text(resolve_env(config.env, settings.cores))
        (trial_dir / "engine.env").write_text(env_text)
    env = engine_env(config, settings)
    failure: Failure | None = None
    startup_s = 0.0
    for attempt in range(max(1, settings.port_retries)):
        port = free_port(settings.host)
        log_path = trial_dir / ("engine.log" if attempt == 0 else f"engine.{attempt}.log")
        argv = build_command(settings, config_path, port)
        started = clock()
        with _spawn(argv, env, log_path, settings.stop_timeout_s) as process:
            failure = _wait_ready(process, settings, port, log_path, started, clock)
            startup_s = clock() - started
            if failure is None:
                url = f"http://{settings.host}:{port}"
                facts = read_facts(_read(log_path), url)
                yield RunningEngine(url, port, process, log_path, startup_s, facts)
                return
        if failure.kind is not FailureKind.PORT_IN_USE:
            raise EngineError(failure, startup_s)
        logger.warning("port %d was taken before the engine bound it; retrying", port)
    raise EngineError(failure or Failure(FailureKind.PORT_IN_USE, "no free port"), startup_s)


@contextmanager
def _spawn(
    argv: list[str], env: dict[str, str], log_path: Path, stop_timeout_s: float
) -> Iterator[subprocess.Popen[bytes]]:
    logger.info("starting engine: %s", shlex.join(argv))
    with open(log_path, "ab") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )  # fmt: skip
    try:
        yield process
    finally:
        terminate_group(process, stop_timeout_s)


def _wait_ready(
    process: subprocess.Popen[bytes],
    settings: LaunchSettings,
    port: int,
    log_path: Path,
    started: float,
    clock: Callable[[], float],
) -> Failure | None:
    """None once `/health` answers 200; the failure if the engine dies or the deadline passes."""
    url = f"http://{settings.host}:{port}/health"
    with httpx.Client(timeout=2.0) as client:
        while True:
            if process.poll() is not None:
                return classify_log(_read(log_path), FailureKind.CRASH)
            if clock() - started > settings.startup_timeout_s:
                failure = classify_log(_read(log_path), FailureKind.STARTUP_TIMEOUT)
                reason = f"not ready after {settings.startup_timeout_s:.0f} s"
                return Failure(FailureKind.STARTUP_TIMEOUT, reason, failure.log_tail)
            try:
                if client.get(url).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
            time.sleep(settings.poll_interval_s)


def terminate_group(process: subprocess.Popen[bytes], stop_timeout_s: float) -> None:
    """End the engine's whole process tree and check that nothing survived.

    SIGTERM to the group first (vLLM shuts its workers down cleanly), SIGKILL after the
    timeout, then SIGKILL to any recorded descendant that left the group.
    """
    pgid = process.pid
    tree = _tree(process.pid)
    _signal_group(pgid, signal.SIGTERM)
    try:
        process.wait(timeout=stop_timeout_s)
    except subprocess.TimeoutExpired:
        logger.warning("engine %d ignored SIGTERM for %.0f s; killing", pgid, stop_timeout_s)
    _signal_group(pgid, signal.SIGKILL)
    if process.poll() is None:
        process.wait(timeout=10)
    _, alive = psutil.wait_procs(tree, timeout=stop_timeout_s)
    for proc in alive:
        _kill(proc)
    _, alive = psutil.wait_procs(alive, timeout=5)
    survivors = alive + group_members(pgid)
    if survivors:
        pids = sorted({p.pid for p in survivors})
        raise TeardownError(f"engine processes survived teardown: {pids}")


def group_members(pgid: int) -> list[psutil.Process]:
    """Live processes in process group `pgid` (zombies excluded)."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill(proc: psutil.Process) -> None:
    with suppress(psutil.Error):
        proc.kill()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
