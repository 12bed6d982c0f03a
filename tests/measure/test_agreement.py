"""Agreement of greedy outputs with the baseline's (measure/_agreement.py, docs/metrics.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.bench import Summary
from autotune.measure import AGREEMENT, Agreement, agreement_of, constraint_values
from autotune.measure._agreement import _output, read_outputs, write_outputs


def test_identical_outputs_agree_fully() -> None:
    assert agreement_of([[1, 2, 3], [4]], [[1, 2, 3], [4]]) == Agreement(1.0, 1.0, 2)


def test_token_agreement_counts_up_to_the_first_difference_over_the_longer_output() -> None:
    # Prompt 1 agrees on 2 of 4 tokens (then differs), prompt 2 on its 2 tokens of 4 (the
    # other goes on), prompt 3 on nothing: (0.5 + 0.5 + 0) / 3; nothing is the same whole.
    found = agreement_of([[1, 2, 3, 4], [5, 6], [7]], [[1, 2, 9, 4], [5, 6, 7, 8], [8]])
    assert found == Agreement(0.0, round(1 / 3, 4), 3)


def test_a_later_difference_agrees_more_than_an_earlier_one() -> None:
    early = agreement_of([[1, 2, 3, 4]], [[9, 2, 3, 4]])
    late = agreement_of([[1, 2, 3, 4]], [[1, 2, 3, 9]])
    assert early.tokens == 0.0 and late.tokens == 0.75 and early.exact == late.exact == 0.0


def test_empty_outputs_agree_and_texts_compare_by_character() -> None:
    assert agreement_of([[]], [[]]).tokens == 1.0
    assert agreement_of(["abcd"], ["abXd"]) == Agreement(0.0, 0.5, 1)


def test_outputs_of_another_prompt_count_are_refused() -> None:
    with pytest.raises(ValueError):
        agreement_of([[1]], [[1], [2]])


def test_token_ids_are_taken_where_the_engine_gives_them_else_the_text() -> None:
    assert _output({"text": "ab", "token_ids": [3, 4]}) == [3, 4]
    assert _output({"text": "ab"}) == "ab"
    assert _output({"text": "ab", "token_ids": None}) == "ab"


def test_outputs_are_kept_in_the_trial_folder(tmp_path: Path) -> None:
    assert read_outputs(tmp_path) is None
    write_outputs(tmp_path, [[1, 2], "text"])
    assert read_outputs(tmp_path) == [[1, 2], "text"]


def test_the_gate_is_a_constraint_like_an_slo(summary_of: Callable[..., Summary]) -> None:
    base = summary_of()
    agreeing = base.model_copy(update={"agreement_tokens": 0.97, "agreement_exact": 0.5})
    parting = base.model_copy(update={"agreement_tokens": 0.6, "agreement_exact": 0.0})
    assert AGREEMENT not in constraint_values(agreeing, {}, 0.0)  # no gate: not a constraint
    assert constraint_values(agreeing, {}, 0.0, min_agreement=0.95)[AGREEMENT] < 0
    assert constraint_values(parting, {}, 0.0, min_agreement=0.95)[AGREEMENT] > 0
    # Unknown outputs (the engine did not answer) and no measurement: infeasible.
    assert constraint_values(base, {}, 0.0, min_agreement=0.0)[AGREEMENT] == 1.0
    assert constraint_values(None, {}, 0.0, "crash", min_agreement=0.9)[AGREEMENT] == 1.0
    assert parting.metric("agreement_tokens") == 0.6 and math.isnan(base.metric("agreement_exact"))
