"""Launch a vLLM OpenAI server for one trial and tear it down, whatever happens.

The engine runs in a new session (its own process group) on a free loopback port, with its log
in the trial folder. Readiness polls `/health` and notices a dead process, or a fatal line in
its log, at once. Teardown ends the whole process group, then every recorded descendant, checks
that none survives, removes the shared memory they leaked, and (on GPU/NPU hosts) waits until
the devices no longer hold their memory. The group's leader is a small supervisor
(`_leader.py`) that ends the whole group if the tuner dies (parent-death signal), and the group
is written to `engine.pid` so that a resumed study can end an engine a killed tuner left.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import shlex
import signal
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

from autotune import layout
from autotune.devices import wait_released
from autotune.engine._args import env_file_text, to_yaml_text
from autotune.engine._cleanup import remove_leaked_shm, shm_used_by
from autotune.engine._config import EngineConfig
from autotune.engine._facts import EngineFacts, read_facts
from autotune.engine._failures import (
    FATAL_OVERLAP,
    Failure,
    classify_exit,
    fatal_failure,
)
from autotune.engine._ports import free_port, wait_port_free
from autotune.status import TrialStatus

logger = logging.getLogger(__name__)

DEFAULT_COMMAND = "{python} -m vllm.entrypoints.openai.api_server"
# The offline (batch) trial's child program; `--config`, `--prompts` and `--out` are appended.
DEFAULT_OFFLINE_COMMAND = "{python} -m autotune.engine._offline_main"
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
    platform: str = "cpu"
    release_timeout_s: float = 120.0
    # Set from another thread to stop this engine as Ctrl-C would (parallel trials: the signal
    # reaches the main thread only). Checked while waiting for readiness and while measuring.
    cancel: threading.Event | None = None

    def check_cancel(self) -> None:
        """Raise KeyboardInterrupt in the calling thread if the trial has been cancelled."""
        if self.cancel is not None and self.cancel.is_set():
            raise KeyboardInterrupt


class LogWatch:
    """Reads what an engine appended to its log since the last look, for fatal lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def fatal(self) -> Failure | None:
        try:
            with open(self.path, "rb") as log:
                start = max(0, self.offset - FATAL_OVERLAP)  # a cut line is read whole
                log.seek(start)
                data = log.read()
        except OSError:
            return None
        self.offset = start + len(data)
        return fatal_failure(data.decode(errors="replace")) if data else None


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
    spawned: _Spawned

    def mark_failed(self) -> None:
        """The engine died or hung: teardown kills it at once instead of asking it to stop
        (a vLLM server that is failing can hang on SIGTERM for longer than the trial took)."""
        self.spawned.failed = True

    def alive(self) -> bool:
        return self.process.poll() is None

    def probe(self) -> str | None:
        """Why the engine is gone or going (exit, or a fatal line in its log); None if healthy.

        Cheap enough to call several times a second: it reads only the log's new text.
        """
        code = self.process.poll()
        if code is not None:
            return f"engine exited with code {code}"
        fatal = self.watch.fatal()
        return None if fatal is None else f"engine log: {fatal.reason}"

    def failure(self, default: TrialStatus = TrialStatus.CRASH, grace_s: float = 2.0) -> Failure:
        """Classify why this engine died, from its exit status and its log.

        A dying engine may still be writing the root cause: wait up to `grace_s` for it to exit.
        """
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace_s)
        return classify_exit(self.process.poll(), _read(self.log_path), default)


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
        env["TMPDIR"] = str(engine_tmpdir(cache))
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
        with _spawn(argv, env, log_path, settings, port) as spawned:
            process = spawned.process
            watch = LogWatch(log_path)
            failure = _wait_ready(process, settings, port, watch, started, clock)
            startup_s = clock() - started
            if failure is None:
                spawned.note_shared_memory()  # the engine's queues exist once it is ready
                url = f"http://{settings.host}:{port}"
                facts = read_facts(_read(log_path), url)
                yield RunningEngine(url, port, process, log_path, startup_s, facts, watch, spawned)
                return
            spawned.failed = True
        if failure.kind is not TrialStatus.PORT_IN_USE:
            raise EngineError(failure, startup_s)
        logger.warning("port %d was taken before the engine bound it; retrying", port)
    raise EngineError(failure or Failure(TrialStatus.PORT_IN_USE, "no free port"), startup_s)


LEADER = Path(__file__).with_name("_leader.py")  # run by path: it imports no package code


@dataclass
class _Spawned:
    """A started engine process and the shared memory its tree was seen using."""

    process: subprocess.Popen[bytes]
    shared: set[Path] = field(default_factory=set)
    failed: bool = False  # teardown skips SIGTERM: a failing vLLM can hang on it

    def tree(self) -> list[psutil.Process]:
        tree = _tree(self.process.pid)
        return tree + [p for p in group_members(self.process.pid) if p not in tree]

    def note_shared_memory(self, tree: list[psutil.Process] | None = None) -> None:
        self.shared |= shm_used_by(p.pid for p in (self.tree() if tree is None else tree))


@contextmanager
def _spawn(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    settings: LaunchSettings,
    port: int | None = None,
) -> Iterator[_Spawned]:
    """Start `argv` under the group leader, log to `log_path`, and tear the tree down on exit
    (`port`: the server's, checked to be free again afterwards; None for an offline run)."""
    logger.info("starting engine: %s", shlex.join(argv))
    with open(log_path, "ab") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            [sys.executable, str(LEADER), str(os.getpid()), *argv],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, preexec_fn=_stop_with_parent,
        )  # fmt: skip
    pid_file = log_path.parent / layout.ENGINE_PID
    _write_pid_file(pid_file, process.pid)
    spawned = _Spawned(process)
    try:
        yield spawned
    finally:
        tree = spawned.tree()
        spawned.note_shared_memory(tree)
        stop_s = 0.0 if spawned.failed else settings.stop_timeout_s
        terminate_group(process, stop_s, tree)  # raises if any survived
        remove_leaked_shm(spawned.shared)
        pid_file.unlink(missing_ok=True)  # kept when teardown failed: a resume reaps the group
        _wait_released(settings, [p.pid for p in tree])
        if port is not None and not wait_port_free(port, settings.host, timeout_s=5):
            logger.warning("port %d is still bound after the engine's teardown", port)


def _wait_released(settings: LaunchSettings, pids: list[int]) -> None:
    """On GPU/NPU hosts, return once no device holds memory for the engine's processes."""
    result = wait_released(settings.platform, pids, None, settings.release_timeout_s)
    if not result.released:
        holders = ", ".join(f"pid {h.pid} on {h.device}" for h in result.holders)
        raise TeardownError(
            f"device memory still held {settings.release_timeout_s:.0f} s after teardown "
            f"({holders})"
        )
    if result.waited_s > 1:
        logger.info("devices released the engine's memory after %.1f s", result.waited_s)


_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _stop_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to send SIGHUP to the group leader (`_leader.py`) when the tuner dies, even by
    SIGKILL; the leader then ends the whole group.

    Linux sends it when the *thread* that started the engine exits: start an engine from a
    thread that lives at least as long as the engine (the launcher's caller does).
    """
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGHUP, 0, 0, 0)


def _write_pid_file(path: Path, pid: int) -> None:
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return
    path.write_text(json.dumps({"pgid": pid, "create_time": created}))


def reap_stale_engine(trial_dir: Path, stop_timeout_s: float = 20.0) -> bool:
    """End the engine that a killed tuner left running for `trial_dir`, if any.

    The process group recorded in `engine.pid` is ended only if its leader is still the process
    that was started (same creation time), so a reused pid is never signalled.
    """
    pid_file = trial_dir / layout.ENGINE_PID
    try:
        record = json.loads(pid_file.read_text())
        leader = psutil.Process(int(record["pgid"]))
        same = abs(leader.create_time() - float(record["create_time"])) < 0.01
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        pid_file.unlink(missing_ok=True)
        return False
    if not same:
        pid_file.unlink(missing_ok=True)
        return False
    logger.warning("ending engine %d left running by an earlier tuner", leader.pid)
    tree = _tree(leader.pid) or [leader]
    shared = shm_used_by(p.pid for p in tree)
    _signal_group(leader.pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(tree, timeout=stop_timeout_s)
    _signal_group(leader.pid, signal.SIGKILL)
    for proc in alive:
        _kill(proc)
    psutil.wait_procs(alive, timeout=5)
    remove_leaked_shm(shared)
    pid_file.unlink(missing_ok=True)
    return True


def _wait_ready(
    process: subprocess.Popen[bytes],
    settings: LaunchSettings,
    port: int,
    watch: LogWatch,
    started: float,
    clock: Callable[[], float],
) -> Failure | None:
    """None once `/health` answers 200; the failure as soon as the engine exits or logs a fatal
    error, or when the deadline passes."""
    url = f"http://{settings.host}:{port}/health"
    with httpx.Client(timeout=2.0) as client:
        while True:
            settings.check_cancel()
            if process.poll() is not None:
                return classify_exit(process.poll(), _read(watch.path), TrialStatus.CRASH)
            if watch.fatal() is not None:
                with suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=settings.fatal_grace_s)  # let it finish its log
                return classify_exit(process.poll(), _read(watch.path), TrialStatus.CRASH)
            if clock() - started > settings.startup_timeout_s:
                failure = classify_exit(None, _read(watch.path), TrialStatus.STARTUP_TIMEOUT)
                reason = f"not ready after {settings.startup_timeout_s:.0f} s"
                return Failure(TrialStatus.STARTUP_TIMEOUT, reason, failure.log_tail)
            try:
                if client.get(url).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
            time.sleep(settings.poll_interval_s)


def terminate_group(
    process: subprocess.Popen[bytes],
    stop_timeout_s: float,
    tree: list[psutil.Process] | None = None,
) -> None:
    """End the engine's whole process tree and check that nothing survived.

    SIGTERM to the group first, and time for every member to exit (vLLM's engine core and
    workers shut down cleanly and unlink their shared memory, even when the server itself is
    already dead); SIGKILL to the group and to any recorded descendant that left it after
    `stop_timeout_s` (at once when it is 0: for an engine that already failed); then wait until
    every one of them is gone.
    """
    pgid = process.pid
    tree = _tree(process.pid) if tree is None else tree
    others = _unique([p for p in tree if p.pid != pgid] + group_members(pgid), exclude=pgid)
    alive = others
    if stop_timeout_s > 0:
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + stop_timeout_s
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=stop_timeout_s)
        _, alive = psutil.wait_procs(others, timeout=max(0.0, deadline - time.monotonic()))
        if process.poll() is None or alive:
            logger.warning("engine %d ignored SIGTERM for %.0f s; killing", pgid, stop_timeout_s)
    _signal_group(pgid, signal.SIGKILL)
    for proc in alive:
        _kill(proc)
    if process.poll() is None:
        process.wait(timeout=10)
    _, alive = psutil.wait_procs(alive, timeout=10)
    late = group_members(pgid)  # started after the first look, or slow to die
    for proc in late:
        _kill(proc)
    _, late = psutil.wait_procs(late, timeout=5)
    survivors = alive + late
    if survivors:
        pids = sorted({p.pid for p in survivors})
        raise TeardownError(f"engine processes survived teardown: {pids}")


def _unique(procs: list[psutil.Process], exclude: int) -> list[psutil.Process]:
    seen: dict[int, psutil.Process] = {}
    for proc in procs:
        if proc.pid != exclude:
            seen.setdefault(proc.pid, proc)
    return list(seen.values())


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
