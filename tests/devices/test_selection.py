"""`--devices 0-3,6`: parsing the list, and limiting an inventory to it."""

from __future__ import annotations

import random

import pytest

from autotune.devices import (
    Device,
    DeviceError,
    Inventory,
    format_device_list,
    parse_device_list,
    select_devices,
)


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("0-3,6", [0, 1, 2, 3, 6]),
        ("7", [7]),
        (" 6 , 0-1 ", [6, 0, 1]),  # the order written is kept
        ("2-2", [2]),
        ("0 - 2", [0, 1, 2]),
    ],
)
def test_parse_device_list(text: str, ids: list[int]) -> None:
    assert parse_device_list(text) == ids


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "--devices is empty"),
        ("  ", "--devices is empty"),
        ("0,,1", "empty item"),
        ("0,", "empty item"),
        ("3-1", "bad range '3-1'"),
        ("1-", "bad item '1-'"),
        ("a", "bad item 'a'"),
        ("0-3-5", "bad item '0-3-5'"),
        ("-1", "negative device id '-1'"),
        ("0,-2-3", "negative device id '-2-3'"),
        ("0-3,2", "device 2 is listed twice"),
        ("1,1", "device 1 is listed twice"),
    ],
)
def test_bad_device_lists_are_one_line_value_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        parse_device_list(text)
    assert isinstance(raised.value, DeviceError)
    assert "\n" not in str(raised.value)


def test_formatting_round_trips() -> None:
    rng = random.Random(4)
    for _ in range(200):
        ids = sorted(rng.sample(range(40), rng.randint(1, 12)))
        assert parse_device_list(format_device_list(ids)) == ids


def _inventory(ids: list[int]) -> Inventory:
    devices = [Device(i, "910B3", 64 << 30, 3 << 30, "npu") for i in ids]
    return Inventory("ascend", devices)


def test_select_keeps_the_listed_devices_in_id_order() -> None:
    selected = select_devices(_inventory(list(range(8))), [6, 0, 1, 2, 3])
    assert selected.ids == [0, 1, 2, 3, 6]
    assert selected.platform == "ascend"


def test_select_names_unknown_and_available_ids() -> None:
    with pytest.raises(DeviceError) as raised:
        select_devices(_inventory([0, 1, 2, 3]), [2, 8, 9])
    assert str(raised.value) == "no ascend devices 8-9 on this host: available are 0-3"
