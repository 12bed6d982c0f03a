"""What became of a trial: the one vocabulary of trial statuses.

Every status a trial can be recorded with is a member of `TrialStatus`: `ok`, `pruned`, the
outcomes of the pre-launch gate (`duplicate`, `predicted_oom`, `predicted_unsupported`,
`invalid_config`) and of the engine model's screening (`predicted_worse`,
`predicted_infeasible`), `unused`, and each failure kind the engine reports (`FAILURE_KINDS`).
Measure, the runner, the store's records, the CLI and the dashboard all compare against these
members; a status read back from the store is a plain string equal to one of them (a `StrEnum`
compares equal to its value).
"""

from __future__ import annotations

from enum import StrEnum


class TrialStatus(StrEnum):
    """A trial's status as the store records it."""

    OK = "ok"  # measured in full
    PRUNED = "pruned"  # measured in part: stopped once its requests decided it (early stopping)
    DUPLICATE = "duplicate"  # never launched: the same config as a measured or running trial
    UNUSED = "unused"  # never launched: the budget was filled by other workers first
    # Why a trial produced no measurement (the engine's failure kinds; see engine._failures).
    OOM = "oom"  # the engine ran out of device (or host) memory
    KV_CAPACITY = "kv_capacity"  # the KV cache cannot hold one request of max_model_len
    STARTUP_TIMEOUT = "startup_timeout"  # not ready before the start-up deadline
    CRASH = "crash"  # the engine died (during start-up or the benchmark) for another reason
    HANG = "hang"  # the engine is alive but streams no tokens, or the benchmark overran
    # Launched, and failed because a value is unsupported on this host or build (vLLM's
    # `... requires ...`, `... is not supported ...`, NotImplementedError).
    UNSUPPORTED = "unsupported"
    INVALID_CONFIG = "invalid_config"  # vLLM (or a pre-launch rule) rejected the options
    PREDICTED_OOM = "predicted_oom"  # never launched: needs at least the memory of a known OOM
    # Never launched: carries the values that made an earlier trial fail as unsupported (or
    # crash the same way twice).
    PREDICTED_UNSUPPORTED = "predicted_unsupported"
    # Never launched: the engine model fitted to the study's trials (autotune.predict) says
    # that even at the good end of its interval it would be dominated by a measured trial
    # (worse), or miss an SLO (infeasible).
    PREDICTED_WORSE = "predicted_worse"
    PREDICTED_INFEASIBLE = "predicted_infeasible"
    BENCHMARK_ERROR = "benchmark_error"
    PORT_IN_USE = "port_in_use"
    INTERRUPTED = "interrupted"  # stopped by the user, or left by a worker that is gone
    ENVIRONMENT = "environment"  # the host, not the config, is at fault


# The statuses that say an engine (or the gate) found no measurement: the failure kinds.
FAILURE_KINDS = frozenset(TrialStatus) - {TrialStatus.OK, TrialStatus.PRUNED}
# The config needs more memory than the device has (measured or predicted).
OOM_STATUSES = frozenset({TrialStatus.OOM, TrialStatus.PREDICTED_OOM})
# A value of the config cannot run here (measured or predicted).
UNSUPPORTED_STATUSES = frozenset({TrialStatus.UNSUPPORTED, TrialStatus.PREDICTED_UNSUPPORTED})
# Never launched: the pre-launch gate's predictions from earlier trials (not measurements).
PREDICTED_STATUSES = frozenset(
    {
        TrialStatus.PREDICTED_OOM,
        TrialStatus.PREDICTED_UNSUPPORTED,
        TrialStatus.PREDICTED_WORSE,
        TrialStatus.PREDICTED_INFEASIBLE,
    }
)
