"""A trial's facts and worker: typed, stored as JSON, read back leniently."""

from __future__ import annotations

import json

from autotune.store import Abort, Cost, TrialFacts, Worker


def test_facts_round_trip_through_json_without_the_unknowns() -> None:
    facts = TrialFacts(
        vllm_version="0.32.0",
        startup_s=41.5,
        counters={"prefix_cache_hits": 768.0},
        repeats=3,
        capacity={"rate": 2.5, "levels": [{"rate": 2.5, "holds": True, "runs": 1}]},
        cost=Cost(per_device_hour=3.6, devices=2),
        abort=Abort.now("pruned", "worse than the front"),
    )
    stored = facts.stored()
    assert "kv_cache_tokens" not in stored  # None is not stored
    assert stored["cost"] == {"per_device_hour": 3.6, "devices": 2}
    assert TrialFacts.read(json.loads(json.dumps(stored))) == facts
    assert facts.abort is not None and facts.abort.noticed_unix is not None


def test_older_or_damaged_facts_read_as_far_as_they_parse() -> None:
    # A key a later version dropped is ignored; a field that does not parse is left out,
    # the rest kept: one bad value does not cost the study's other facts.
    read = TrialFacts.read({"startup_s": 12.0, "retired_key": 1, "repeats": "many"})
    assert read == TrialFacts(startup_s=12.0)
    assert TrialFacts.read(None) == TrialFacts()
    assert TrialFacts.read("not a dict") == TrialFacts()


def test_every_fact_says_what_it_is() -> None:
    # The nested ones (cost, abort) are models whose own fields say it.
    undocumented = [
        f"{model.__name__}.{name}"
        for model in (TrialFacts, Cost, Abort, Worker)
        for name, field in model.model_fields.items()
        if not field.description and name not in ("cost", "abort", "reason")
    ]
    assert undocumented == []


def test_a_stored_worker_reads_back_and_a_damaged_one_keeps_what_parses() -> None:
    worker = Worker(host="node-1", pid=4242, started=1.7e9, run="ab12", lane=1, devices="0,1")
    assert Worker.read(json.loads(json.dumps(worker.stored()))) == worker
    assert Worker.read({"host": "node-1", "pid": "not a pid"}) == Worker(host="node-1")
    assert Worker.read(None) == Worker()
