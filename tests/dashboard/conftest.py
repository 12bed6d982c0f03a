"""Studies tuned against the fake engine through the CLI, read by every dashboard test."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from cli.conftest import invoke, tune_args
from support import built_once

from autotune.dashboard import Catalog, DashboardApp

SLOS = ("--slo", "p99_ttft_ms=1000", "--slo", "p99_tpot_ms=100")


@dataclass(frozen=True)
class Studies:
    """`ok`: 5 measured trials with SLOs and a finished confirm step; `oom`: a baseline that
    failed at start-up (the study stopped there); `pruned`: a baseline that misses its SLO and
    a trial stopped early."""

    root: Path
    ok: str = "s1"
    oom: str = "s2"
    pruned: str = "s3"


@pytest.fixture(scope="package")
def studies(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Studies:
    """The three studies, tuned once for every worker of the run (`built_once`): the
    dashboard tests only read them (a test that changes one works on its copy)."""

    def build(root: Path) -> None:
        found = Studies(root)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("FAKE_ENGINE_STARTUP_S", "0.1")
            mp.delenv("FAKE_ENGINE_FAIL", raising=False)
            ok = invoke(
                *tune_args(tiny_model, root, found.ok, "--trials", "5", "--sampler", "random"),
                *SLOS, "--confirm", "2", "--confirm-rounds", "2",
            )  # fmt: skip
            assert ok.exit_code == 0, ok.output
            pruned = invoke(
                *tune_args(tiny_model, root, found.pruned, "--trials", "2", "--sampler", "random"),
                "--slo", "p99_ttft_ms=0.01", "--prune",
                "--workload", "random:input=32,output=8,prompts=64,warmup=1", "--rate", "50",
            )  # fmt: skip
            assert pruned.exit_code == 3, pruned.output  # nothing meets the SLO: the closest
            assert "Closest: trial" in pruned.output and "--allow-infeasible" in pruned.output
            mp.setenv("FAKE_ENGINE_FAIL", "oom")
            oom = invoke(*tune_args(tiny_model, root, found.oom, "--trials", "2"))
            assert oom.exit_code == 1, oom.output  # the baseline failed: the study stopped

    return Studies(built_once(tmp_path_factory, "dashboard-studies", build))


@pytest.fixture
def app(studies: Studies) -> DashboardApp:
    return DashboardApp(Catalog(studies.root))


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()


def call(app: Any, path: str, method: str = "GET") -> Reply:
    """One request through the WSGI app, no socket."""
    seen: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        seen["status"], seen["headers"] = int(status.split()[0]), dict(headers)

    environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path}
    setup_testing_defaults(environ)
    body = b"".join(app(environ, start_response))
    return Reply(seen["status"], seen["headers"], body)


def copy_study(studies: Studies, name: str, dest: Path) -> Path:
    """A private copy of one study's folder (its trial folders stay where they are)."""
    shutil.copytree(studies.root / name, dest / name)
    return dest
