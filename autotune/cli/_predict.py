"""`autotune predict`: what a config would measure, by the engine model of a study's trials."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from autotune.cli._common import InputError, RootOpt, StorageOpt, cli_errors, console, open_store
from autotune.cli._table import Format
from autotune.inputs.yamlfile import load_yaml
from autotune.store import StudyFacts
from autotune.vocab.platform import Platform
from autotune.vocab.slo import bounds_of


def predict(
    study: Annotated[str, typer.Argument(help="Study name")],
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="NAME=VALUE: a parameter of the study's space or an engine option (repeat "
            "it); the rest is the baseline's config",
        ),
    ] = None,
    output_format: Annotated[Format, typer.Option("--format", help="table or json")] = Format.TABLE,
    storage: StorageOpt = None,
    root: RootOpt = Path("studies"),
) -> None:
    """Predict a config's metrics, with intervals, by the engine model fitted to the study's
    measured trials (no launch)."""
    from autotune.answer.selection import baseline
    from autotune.bench import LoadProfile
    from autotune.predict import REPORTED, engine_options
    from autotune.study import percentage_errors, study_model

    with cli_errors():
        store = open_store(study, storage, root, read_only=True)
        records = store.trials(study)
        facts = store.study_facts(study)
        base = baseline(records)
        if base is None:
            raise InputError(f"study {study!r} has no measured baseline to start the config from")
        config, ignored = _config(base.config, base.params, facts, settings or [])
        if facts.scenario == "offline" or facts.capacity:
            raise InputError("the engine model replays an online load at a fixed rate only")
        load = LoadProfile.model_validate(facts.load or {"rate": 8.0})
        model = study_model(records, load, facts.platform or Platform.CPU)
        if model is None:
            raise InputError(
                f"study {study!r} has no measured trial whose request records and logged KV "
                "capacity are on this machine: nothing to calibrate the engine model on"
            )
        prediction = model.predict(engine_options(config), bounds_of(facts.all_slos))
        errors = percentage_errors(records)
    if output_format is Format.JSON:
        out = {"config": config, "prediction": prediction.stored(), "ignored": ignored,
               "mape": {k: statistics.fmean(v) for k, v in errors.items()},
               "median_ape": {k: statistics.median(v) for k, v in errors.items()}}  # fmt: skip
        typer.echo(json.dumps(out, indent=2, default=str))
        return
    changed = " ".join(settings or []) or "the baseline's config"
    console.print(
        f"Study {study}: {changed}, predicted by the engine model of {prediction.trials} "
        f"measured trials (KV cache {prediction.kv_tokens:,} tokens)"
    )
    if prediction.failure is not None:
        console.print(f"predicted not to start: {prediction.failure} (the KV cache cannot hold "
                      "the workload's longest request)")  # fmt: skip
        raise typer.Exit(1)
    for name in (*REPORTED, "request_throughput", "p99_e2e_ms"):
        i = prediction.metrics[name]
        seen = errors.get(name)
        so_far = (
            f"   error so far {statistics.median(seen):.0%} (median of {len(seen)})" if seen else ""
        )
        console.print(f"  {name:<20} {i.mid:>12,.2f}   ({i.low:,.2f} - {i.high:,.2f}){so_far}")
    if ignored:
        console.print(f"the model does not read {', '.join(ignored)}: predicted as the baseline")


def _config(
    base: dict[str, Any], params: dict[str, Any], facts: StudyFacts, settings: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """The baseline's engine options with `settings` applied (a space parameter through the
    space, which may scale or rename it; else an engine option); and the names set that the
    model does not read."""
    from autotune.predict import MODELLED_OPTIONS, engine_options
    from autotune.space import SpaceError, load_space, option_range_problem, value_problem

    config = engine_options(base)
    space = None
    spec = facts.spec or {}
    if spec.get("space"):
        try:
            space = load_space(spec["space"])
        except SpaceError:
            space = None
    params = dict(params)
    raw: dict[str, Any] = {}
    tuned = {p.name for p in space.parameters} if space is not None else set()
    for item in settings:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise InputError(f"--set {item!r}: expected NAME=VALUE")
        value = _value(item, text)
        option = name.replace("-", "_")
        if space is not None and name in tuned:  # the value is wrong, not the study's space
            if (problem := value_problem(space.parameters, name, value)) is not None:
                raise InputError(f"--set {item}: {problem}")
            params[name] = value
        elif option in MODELLED_OPTIONS or option in config:
            if (problem := option_range_problem(option, value)) is not None:
                raise InputError(f"--set {item}: {option} {problem}")
            raw[option] = value
        else:
            raise InputError(
                f"--set {name}: not a parameter of the study's space nor an engine option the "
                f"model reads ({', '.join(sorted(MODELLED_OPTIONS))})"
            )
    if space is not None:
        config.update(engine_options(space.to_engine(params)[0]))
    config.update(raw)
    ignored = [name for name in (s.partition("=")[0] for s in settings)
               if _option_of(space, name) not in MODELLED_OPTIONS]  # fmt: skip
    return config, ignored


def _value(item: str, text: str) -> Any:
    """A `--set` value, read as YAML (`64`, `true`, `fp8`)."""
    try:
        return load_yaml(text)
    except yaml.YAMLError:
        raise InputError(f"--set {item!r}: {text!r} is not a YAML value") from None


def _option_of(space: Any, name: str) -> str | None:
    """The engine option that `name` sets: a space parameter's (None: an env variable), else
    the name itself."""
    for p in space.parameters if space is not None else ():
        if p.name == name:
            return p.target_option.replace("-", "_") if p.target_option else None
    return name.replace("-", "_")
