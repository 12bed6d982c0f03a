"""A tuner stopped while it measures (SIGSTOP / SIGCONT, as a swapping or overloaded host
does) never books the stop as the config's latency: the run is voided, kept, and made again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from autotune.measure import load_measurement
from autotune.vocab.status import TrialStatus

TUNER = """\
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from support import fake_settings
from autotune.bench import LoadProfile, RequestSpec
from autotune.engine import EngineConfig
from autotune.measure import Workplan, measure

tmp = Path(sys.argv[1])
def requests(k):
    return [RequestSpec([k, i, 3, 4], 16) for i in range(40)]
plan = Workplan([], requests(0), LoadProfile(concurrency=8), {}, hang_s=10.0,
                deadline_s=120.0, rerun=requests)
env = {"FAKE_ENGINE_STARTUP_S": "0.1", "FAKE_ENGINE_STEP_S": "0.02"}
m = measure(EngineConfig(model="tiny", args={"max_num_seqs": 8}), tmp / "trial", plan,
            fake_settings(tmp, extra_env=env))
print(m.status, m.reason)
"""


def test_a_stopped_tuner_voids_its_run_and_measures_it_again(tmp_path: Path) -> None:
    script = tmp_path / "tuner.py"
    script.write_text(TUNER)
    tests = str(Path(__file__).resolve().parents[1])
    tuner = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), tests], stdout=subprocess.PIPE, text=True
    )
    log = tmp_path / "trial" / "engine.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and "completion requests with fields" in log.read_text()):
        assert time.monotonic() < deadline and tuner.poll() is None, "no request was sent"
        time.sleep(0.02)
    time.sleep(0.3)
    os.kill(tuner.pid, signal.SIGSTOP)  # the engine, in its own session, serves on
    time.sleep(2.0)
    os.kill(tuner.pid, signal.SIGCONT)
    out, _ = tuner.communicate(timeout=120)
    assert tuner.returncode == 0, out

    trial = tmp_path / "trial"
    stored = json.loads((trial / "measurement.json").read_text())
    assert stored["status"] == TrialStatus.OK, out
    voided = stored["engine"]["voided"]
    assert len(voided) == 1 and voided[0]["stall_s"] > 1.5
    assert (trial / voided[0]["records"]).exists()  # the voided run, kept
    m = load_measurement(trial, {})
    assert m is not None and m.summary is not None
    # The run made again measured the config: a decode step of about 30 ms, not the stop's
    # 2 s spread over 15 tokens (about 130 ms) added to it.
    assert m.summary.tpot_ms.p99 < 70, m.summary.tpot_ms
