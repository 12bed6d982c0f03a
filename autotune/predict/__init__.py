"""A model of the engine, calibrated from a study's own measurements: the scheduler replayed
over the study's workload (`_scheduler`, `_replay`), a step time fitted to every measured
request (`_fit`), and the model that predicts an untried config with an interval (`_model`)."""

from autotune.predict._model import (
    MODELLED_OPTIONS,
    PREDICTED,
    REPORTED,
    EngineModel,
    Interval,
    Prediction,
    Sample,
    engine_options,
    error,
    widths_of,
)
from autotune.predict._replay import Arrivals, Replayed, fits_one_request, replay
from autotune.predict._scheduler import (
    Request,
    Scheduler,
    SchedulerConfig,
    StepShape,
    StepTimer,
)

__all__ = [
    "MODELLED_OPTIONS",
    "PREDICTED",
    "REPORTED",
    "Arrivals",
    "EngineModel",
    "Interval",
    "Prediction",
    "Replayed",
    "Request",
    "Sample",
    "Scheduler",
    "SchedulerConfig",
    "StepShape",
    "StepTimer",
    "engine_options",
    "error",
    "fits_one_request",
    "replay",
    "widths_of",
]
