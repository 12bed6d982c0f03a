"""The platform as one typed value that reads and writes as its plain string (issue 49).

Stored studies, space files, spec files and CLI flags hold "ascend", "cuda" or "cpu": they must
read into the `Platform` members and be written back as the same strings, never as
"Platform.CPU" or a YAML tag.
"""

from __future__ import annotations

import json

import optuna
import pytest
import yaml

from autotune.devices import PLATFORMS, Device, Inventory, Platform
from autotune.space import SearchSpace, load_space
from autotune.store import StudyFacts, write_study


def test_each_member_is_its_string() -> None:
    assert [str(p) for p in PLATFORMS] == ["ascend", "cuda", "cpu"]
    assert Platform("cuda") is Platform.CUDA
    assert Platform.CPU == "cpu"
    assert f"{Platform.ASCEND} devices" == "ascend devices"
    assert "%s" % Platform.CUDA == "cuda"  # noqa: UP031 (as logging formats it)
    assert json.dumps({"platform": Platform.CPU}) == '{"platform": "cpu"}'
    assert {"cuda": 1}[Platform.CUDA] == 1  # dicts keyed either way agree


def test_an_inventory_reads_the_string_and_writes_it_back() -> None:
    inventory = Inventory("cpu", [Device(0, "cpu", None, None, "cpu")])  # type: ignore[arg-type]
    assert inventory.platform is Platform.CPU
    assert inventory.source == "NUMA nodes"
    data = json.loads(json.dumps(inventory.to_dict()))
    assert data["platform"] == "cpu"
    assert type(inventory.to_dict()["platform"]) is str
    assert "platform: cpu\n" in yaml.safe_dump(inventory.to_dict())


@pytest.mark.parametrize("name", ["cpu", "cuda", "ascend"])
def test_a_space_file_round_trips_its_platform(name: str) -> None:
    space = load_space(name)
    assert space.platform is Platform(name)
    dumped = space.model_dump(mode="json")
    text = yaml.safe_dump(dumped, sort_keys=False)
    assert f"platform: {name}\n" in text
    again = SearchSpace.model_validate(yaml.safe_load(text))
    assert again.platform is Platform(name)


def test_a_space_for_any_platform_keeps_any() -> None:
    data = load_space("cuda").model_dump(mode="json")
    space = SearchSpace.model_validate({**data, "platform": "any"})
    assert space.platform == "any" and not isinstance(space.platform, Platform)
    with pytest.raises(ValueError):
        SearchSpace.model_validate({**data, "platform": "npu"})


@pytest.mark.parametrize("given", [Platform.ASCEND, "ascend", "any"])
def test_a_stored_study_keeps_the_plain_string(given: str) -> None:
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    write_study(study, platform=given)
    stored = study.user_attrs["platform"]
    assert stored == str(given) and type(stored) is str
    read = StudyFacts.of(study).platform
    assert read == given
    assert (read is Platform.ASCEND) == (given != "any")
    assert StudyFacts.of(study).stored()["platform"] == str(given)
