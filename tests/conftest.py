"""Fixtures shared across the test tree; the study, search and measure tests' own (summaries,
trial records, specs, spaces and the scripted measure) at the end."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from builders import make_summary, record
from study.fakes import STUDY, FakeMeasure
from support import Ran, built_once, run_in_process
from vllm_child import VllmChild

from autotune.bench import Summary
from autotune.space import SearchSpace, load_space
from autotune.spec import TuneSpec
from autotune.store import TrialRecord

REPO = Path(__file__).resolve().parents[1]
FAKE_ENGINE = REPO / "tests" / "fake_engine.py"

# A suite started in the background of a non-interactive shell (`scripts/test.sh &`) inherits
# SIGINT ignored, as every background job does, and so would each tuner and dashboard a test
# starts: the tests that stop one with SIGINT (Ctrl-C) then waited out their bounds. A Python
# handler is reset to the default on exec, so their processes take SIGINT as a user's would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Under `nohup` SIGHUP is ignored the same way, and the engine leaders a test starts itself (not
# through the launcher, which sets it back) would inherit that: the test that sends them SIGHUP
# across their start-up then waited 120 s on each one that ignored it.
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that start the most real engines first (`@pytest.mark.starts(n)`): the
    engine tests run three at a time (scripts/test.sh), and the longest chain of starts sets
    the run's wall time least when it begins first. Unmarked tests keep their order."""
    items.sort(key=lambda item: -_starts(item))


def _starts(item: pytest.Item) -> int:
    marker = item.get_closest_marker("starts")
    return int(marker.args[0]) if marker is not None else 0


@pytest.fixture(scope="session")
def vllm_child() -> Iterator[VllmChild]:
    """vLLM imported once in a child for the tests that ask its parsers (tests/vllm_child.py);
    mark them `xdist_group("vllm")` so that one worker runs them all."""
    child = VllmChild()
    yield child
    child.close()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight Llama (no hub access needed), generated once per pytest process,
    or once for all of scripts/test.sh's runs and workers (`support.built_once`)."""
    from autotune.tiny.model import make_tiny_model

    return built_once(tmp_path_factory, "models", lambda f: make_tiny_model(f / "tiny")) / "tiny"


@pytest.fixture(scope="session", autouse=True)
def host_lock_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's own host-wide device locks (autotune.devices._hostlock): its tuners queue
    for each other's devices as real ones do, never for a tuner the developer runs beside."""
    import os

    folder = tmp_path_factory.mktemp("host-locks")
    os.environ["AUTOTUNE_LOCK_DIR"] = str(folder)
    return folder


@pytest.fixture(scope="session", autouse=True)
def no_inherited_device_selection() -> None:
    """A developer's CUDA_VISIBLE_DEVICES (or ASCEND_RT_VISIBLE_DEVICES) would narrow every
    stand-in GPU or NPU host's pool (autotune.devices._selection.inherited); the tests that
    mean one set it."""
    import os

    for name in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"):
        os.environ.pop(name, None)


# --- the study, search and measure tests' ---


@pytest.fixture
def autotune_here(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Ran]:
    """`autotune_here(*argv, cwd=None, env=None)`: `autotune ARGV` in this process, as a fresh
    interpreter runs it (`support.run_in_process`): exit status, stdout and stderr."""

    def run(*argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> Ran:
        return run_in_process([str(a) for a in argv], monkeypatch, capsys, cwd=cwd, env=env)

    return run


@pytest.fixture
def summary_of() -> Callable[..., Summary]:
    """`summary_of(throughput=..., ttft_p99=..., tpot_p99=..., completed=..., errors=...)`."""
    return make_summary


@pytest.fixture
def trial() -> Callable[..., TrialRecord]:
    """`trial(number, throughput, ttft, tpot, status=, role=, constraints=, config=)`."""
    return record


# --- the runner's fixtures, shared by test_runner and test_lanes ---


@pytest.fixture
def space() -> SearchSpace:
    return load_space("cpu-quick")


@pytest.fixture
def make_spec(tiny_model: Path, tmp_path: Path) -> Callable[..., TuneSpec]:
    def make(**fields: Any) -> TuneSpec:
        data: dict[str, Any] = {
            "study": STUDY,
            "model": str(tiny_model),
            "space": "cpu-quick",
            "root": tmp_path / "studies",
            "trials": 3,
            "sampler": "random",
            # The runner's tests read every objective's value as Optuna was told it.
            "search": "pareto",
            **fields,
        }
        return TuneSpec.model_validate(data)

    return make


@pytest.fixture
def measure(summary_of: Callable[..., Summary]) -> FakeMeasure:
    return FakeMeasure(summary_of)
