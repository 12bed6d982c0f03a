"""`autotune tune`'s flags as the spec fields they set: what the command line owns, apart from
running the study (`cli/_tune.py`)."""

from __future__ import annotations

from typing import Any

from autotune.cli._common import InputError, parse_load_client
from autotune.spec import parse_objectives, parse_precision, parse_slos


def tune_overrides(flags: dict[str, Any]) -> dict[str, Any]:
    """Flag values as spec fields (None: not given, so the spec file's value stays)."""
    out: dict[str, Any] = {
        key: flags[key]
        for key in ("study", "model", "space", "workload", "trials", "storage", "root")
        if flags[key] is not None
    }
    for key in (
        *("search", "sampler", "seed", "served_model_name", "repair", "devices", "warm_start"),
        *("repeats", "prune", "confirm", "confirm_rounds", "scenario", "remeasure", "screen"),
        *("device_cost_per_hour", "reingest", "min_agreement", "min_gain"),
    ):
        if flags[key] is not None:
            out[key] = flags[key]
    if flags["load_client"] is not None:
        out["load_client"] = parse_load_client(flags["load_client"])
    if flags["precision"] is not None:
        out["precision"] = parse_precision(flags["precision"])
    if flags["load"] is not None:
        if flags["load"] not in ("fixed", "capacity"):
            raise InputError(f"--load {flags['load']!r}: expected fixed or capacity")
        out["capacity"] = {} if flags["load"] == "capacity" else None
    if flags["parallel"] is not None:
        out["parallel"] = parse_parallel(flags["parallel"])
    if flags["rate"] is not None or flags["concurrency"] is not None:
        out["load"] = {"rate": flags["rate"], "concurrency": flags["concurrency"]}
    if flags["slo"]:
        out["slos"], out["relative_slos"] = parse_slos(flags["slo"])
    if flags["objective"]:
        out["objectives"] = parse_objectives(flags["objective"])
    engine: dict[str, Any] = {}
    if flags["engine_command"] is not None:
        engine["command"] = flags["engine_command"]
    if flags["option"]:
        engine["options"] = _options(flags["option"])
    if engine:
        out["engine"] = engine
    if "study" not in out and flags["spec"] is None:
        raise InputError("--study NAME is required")
    return out


def parse_parallel(value: str) -> int | str:
    """`--parallel`: a number >= 1 or `auto`."""
    if value == "auto":
        return value
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise InputError(f"--parallel {value!r}: expected a number >= 1 or auto")
    return number


def _options(items: list[str]) -> dict[str, Any]:
    import yaml

    from autotune.inputs.yamlfile import load_yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--option {item!r}: expected KEY=VALUE, e.g. max_model_len=1024")
        try:
            out[key] = load_yaml(value)
        except yaml.YAMLError:
            raise InputError(f"--option {item!r}: {value!r} is not a YAML value") from None
    return out
