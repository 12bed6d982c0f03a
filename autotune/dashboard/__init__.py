"""A web dashboard over the study store (read-only), and a one-file HTML report of a study."""

from autotune.dashboard._catalog import Catalog, UnknownStudy
from autotune.dashboard._data import StudyRow, StudyView, study_rows, study_state, study_view
from autotune.dashboard._optuna import OptunaDashboardError
from autotune.dashboard._optuna import mount as mount_optuna
from autotune.dashboard._report import render_report, write_report
from autotune.dashboard._server import BindError, DashboardApp, check_host, serve
from autotune.dashboard._trial import TrialView, UnknownTrial, export_text, trial_view

__all__ = [
    "BindError",
    "Catalog",
    "DashboardApp",
    "OptunaDashboardError",
    "StudyRow",
    "StudyView",
    "TrialView",
    "UnknownStudy",
    "UnknownTrial",
    "check_host",
    "export_text",
    "mount_optuna",
    "render_report",
    "serve",
    "study_rows",
    "study_state",
    "study_view",
    "trial_view",
    "write_report",
]
