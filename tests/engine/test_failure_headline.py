"""`failure_headline`: a failure's reason with its cause first, for a narrow column."""

from __future__ import annotations

from autotune.engine import classify_exit, failure_headline
from autotune.vocab.status import TrialStatus


def test_the_cause_comes_first_and_the_exit_status_after_it() -> None:
    reason = (
        "engine exited with status 1; its log says: (EngineCore_DP0 pid=7) ERROR 01-02 "
        "03:04:05 [core.py:9] RuntimeError: Engine core initialization failed"
    )
    assert failure_headline(reason) == (
        "RuntimeError: Engine core initialization failed (engine exited with status 1)"
    )


def test_a_log_line_loses_its_prefix_and_other_reasons_stay() -> None:
    line = "(APIServer pid=1) ERROR 12-01 10:00:00 [api_server.py:1] torch.OutOfMemoryError: x"
    assert failure_headline(line) == "torch.OutOfMemoryError: x"
    plain = "without chunked prefill, max_num_batched_tokens (902) must be >= max_model_len"
    assert failure_headline(plain) == plain
    assert failure_headline("") == ""


def test_a_classified_exit_reads_cause_first() -> None:
    log = (
        "INFO starting\n(EngineCore pid=3) ERROR 12-01 10:00:00 [core.py:1] "
        "EngineCore failed to start.\nValueError: bad option\n"
    )
    failure = classify_exit(1, log, TrialStatus.CRASH)
    headline = failure_headline(failure.reason)
    assert headline.startswith(("ValueError: bad option", "EngineCore failed to start"))
    assert "pid=3" not in headline
