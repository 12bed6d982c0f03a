"""`autotune dashboard` (a read-only web page over the store) and `autotune report` (one file)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import typer

from autotune.cli._common import (
    InputError,
    RootOpt,
    StorageOpt,
    checked_name,
    checked_output,
    checked_store,
    cli_errors,
    console,
    err_console,
)
from autotune.dashboard import (
    BindError,
    Catalog,
    DashboardApp,
    OptunaDashboardError,
    UnknownStudy,
    check_host,
    mount_optuna,
    serve,
    write_report,
)

HOST_ENV = "AUTOTUNE_DASHBOARD_HOST"


def _catalog(root: Path, storage: str | None, study: str | None) -> Catalog:
    """The catalog, checked once: an unreadable store or an unknown study stops here."""
    checked_store(storage, root, study)
    catalog = Catalog(root, storage, study)
    try:
        catalog.check(study)
    except UnknownStudy as exc:
        raise InputError(str(exc)) from None
    return catalog


def dashboard(
    ctx: typer.Context,
    study: Annotated[
        str | None, typer.Option(help="Open at this study (default: list every study)")
    ] = None,
    storage: StorageOpt = None,
    root: RootOpt = Path("studies"),
    host: Annotated[
        str,
        typer.Option(
            envvar=HOST_ENV,
            help="Address to listen on; one that is not loopback only when given as --host",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free port)")] = 8080,
    optuna: Annotated[
        bool, typer.Option("--optuna", help="Also serve optuna-dashboard under /optuna/")
    ] = False,
) -> None:
    """Serve a read-only web dashboard of the studies (Pareto front, history, trials, logs)."""
    with cli_errors():
        try:
            check_host(host, _given_on_command_line(ctx, "host"))
        except BindError as exc:
            raise InputError(str(exc)) from None
        catalog = _catalog(root, storage, study)
        mounted = None
        if optuna:
            store = catalog.single_storage()
            if store is None:
                raise InputError("--optuna needs one storage: pass --study NAME or --storage URL")
            try:
                mounted = mount_optuna(store.storage)
            except OptunaDashboardError as exc:
                raise InputError(str(exc)) from None
        try:
            server = serve(DashboardApp(catalog, optuna=mounted), host, port)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{server.server_port}/"
    if study is not None:
        url += f"studies/{quote(study, safe='')}"
    console.print(f"dashboard of {catalog.describe()} at {url} (Ctrl-C to stop)", soft_wrap=True)
    if mounted is not None:
        console.print(f"optuna-dashboard at http://{shown}:{server.server_port}/optuna/dashboard")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        err_console.print("dashboard stopped")
    finally:
        server.server_close()


def _given_on_command_line(ctx: typer.Context, name: str) -> bool:
    """Whether option `name` was typed on the command line (not a default or env var).

    By the source's name: typer carries its own copy of click, whose `ParameterSource` is not
    the installed click's, so an identity check against `click.core` never matches.
    """
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def report(
    study: Annotated[str, typer.Argument(help="Study name")],
    output: Annotated[Path, typer.Option("-o", "--output", help="HTML file to write")] = Path(
        "report.html"
    ),
    storage: StorageOpt = None,
    root: RootOpt = Path("studies"),
) -> None:
    """Write the study's dashboard page as one self-contained HTML file (opens offline)."""
    with cli_errors():
        checked_name("-o", output)
        if output.is_dir():
            raise InputError(f"-o {output}: is a folder; name the HTML file, e.g. -o report.html")
        checked_output("-o", output)
        catalog = _catalog(root, storage, study)
        try:
            size = write_report(catalog, study, output)
        except OSError as exc:
            raise InputError(f"-o {output}: cannot write: {exc.strerror or exc}") from None
        console.print(f"wrote {output} ({size / 1e6:.1f} MB, self-contained: opens offline)")
