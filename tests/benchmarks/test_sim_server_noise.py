"""benchmarks/sim/server.py and cli.py on a noise profile: each server start is one run of the
profile's host, its step times over the draw's speed, the study's devices and windows shared."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
# `benchmarks` here is tests/benchmarks: import benchmarks/sim as the top-level package `sim`.
sys.path.insert(0, str(REPO / "benchmarks"))

import sim.cli  # noqa: E402
from sim.compare import parse_args  # noqa: E402
from sim.landscapes import LANDSCAPES  # noqa: E402
from sim.model import SimConfig  # noqa: E402
from sim.noise import DEDICATED, SHARED  # noqa: E402
from sim.server import Noise  # noqa: E402
from sim.truth import Truth  # noqa: E402
from sim.tuning import METHODS  # noqa: E402

SERVER = REPO / "benchmarks" / "sim" / "server.py"
LLAMA = LANDSCAPES["llama8b-h100-throughput"]
CFG = SimConfig()
STEADY = dataclasses.replace(SHARED, throughput_sd=0.0, degraded_p=0.0, bad_windows=None)


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("SIM_NOISE", "SIM_SEED", "SIM_DRIFT", "SIM_NOISE_SEED", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_degraded_run_makes_every_step_as_much_longer(host: pytest.MonkeyPatch) -> None:
    halved = dataclasses.replace(
        DEDICATED, throughput_sd=0.0, device_sd=0.0, degraded_p=1.0, degraded_throughput=(0.5, 0.5)
    )
    noise = Noise(CFG, halved)
    assert noise.draw is not None and noise.draw.degraded
    assert noise.factor() == pytest.approx(2.0)  # no jitter, no drift: the draw alone
    host.setenv("SIM_NOISE", "0.3")  # the uniform model's level is not drawn beside a profile
    assert Noise(CFG, halved).factor() == pytest.approx(2.0)


def test_each_start_draws_afresh_on_the_studys_own_devices(host: pytest.MonkeyPatch) -> None:
    host.setenv("SIM_NOISE_SEED", "11")
    host.setenv("CUDA_VISIBLE_DEVICES", "3,4")  # the first leased device is the run's
    on_3 = [Noise(CFG, STEADY).factor() for _ in range(3)]
    assert on_3[0] != 1.0 and on_3 == pytest.approx([on_3[0]] * 3)  # one device, one offset
    host.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert Noise(CFG, STEADY).factor() != pytest.approx(on_3[0])
    host.setenv("SIM_NOISE_SEED", "12")  # another study's devices
    host.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert Noise(CFG, STEADY).factor() != pytest.approx(on_3[0])
    # The run's own spread: fresh per start (a real host's), fixed per config under SIM_SEED.
    spread = dataclasses.replace(STEADY, throughput_sd=0.05)
    assert len({Noise(CFG, spread).factor() for _ in range(4)}) == 4
    host.setenv("SIM_SEED", "1")
    assert len({Noise(CFG, spread).factor() for _ in range(4)}) == 1


def test_the_server_takes_a_profile_by_flag_or_environment(tmp_path: Path) -> None:
    config = tmp_path / "engine.yaml"
    config.write_text("max-num-seqs: 64\n")
    env = {**os.environ, "SIM_LANDSCAPE": LLAMA.name, "SIM_STARTUP_S": "0"}
    cmd = [sys.executable, str(SERVER), "--config", str(config), "--port", "1"]
    bad = subprocess.run([*cmd, "--noise-profile", "cloudy"], env=env, capture_output=True)
    assert bad.returncode == 2 and b"unknown noise profile 'cloudy'" in bad.stderr
    bad = subprocess.run(cmd, env={**env, "SIM_NOISE_PROFILE": "x"}, capture_output=True)
    assert bad.returncode == 2 and b"SIM_NOISE_PROFILE: one of" in bad.stderr


def test_the_cli_benchmark_hands_its_profile_to_every_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = parse_args(["--landscape", LLAMA.name, "--cli", "--noise-profile", "shared"])
    assert (args.cli, args.noise_profile, args.noise) == (True, "shared", 0.0)
    seen: list[dict[str, str]] = []

    def tune(cmd: list[str], env: dict[str, str], log: Path) -> bool:
        seen.append(env)
        raise StopIteration  # the environment is what this test reads

    monkeypatch.setattr(sim.cli, "_run", tune)
    for profile in ("shared", None):
        with pytest.raises(StopIteration):
            sim.cli.run_cli(LLAMA, METHODS["gp"], 4, 1, Truth(LLAMA), tmp_path, profile=profile)
    given: dict[str, Any] = seen[0]
    assert given["SIM_NOISE_PROFILE"] == "shared"
    assert given["SIM_NOISE_SEED"] == str(4 * 7919 + 1)  # in-process run_method's seed
    assert seen[1]["SIM_NOISE_PROFILE"] == ""  # none: the uniform model, not an inherited one
