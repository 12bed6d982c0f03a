"""Where studies and their measured trials live (any Optuna RDB storage)."""

from autotune.store._records import (
    CONFIG,
    DESCRIPTION,
    DEVICE_S,
    ENGINE,
    ENV,
    LOG_TAIL,
    METRICS,
    REASON,
    ROLE,
    ROLE_BASELINE,
    STATUS,
    STATUS_OK,
    TRIAL_DIR,
    StudyInfo,
    TrialRecord,
    study_records,
)
from autotune.store._storage import StorageError, StudyStore, redact, storage_errors

__all__ = [
    "CONFIG",
    "DESCRIPTION",
    "DEVICE_S",
    "ENGINE",
    "ENV",
    "LOG_TAIL",
    "METRICS",
    "REASON",
    "ROLE",
    "ROLE_BASELINE",
    "STATUS",
    "STATUS_OK",
    "TRIAL_DIR",
    "StorageError",
    "StudyInfo",
    "StudyStore",
    "TrialRecord",
    "redact",
    "storage_errors",
    "study_records",
]
