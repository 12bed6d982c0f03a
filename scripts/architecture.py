"""Writes docs/architecture.md from the code: the prose of docs/architecture.in.md with the
generated parts filled in (the layer order, which layers import which, and every module with
its layer, its line count and the first sentence of its docstring).

It also owns the package's layers and the reader of its imports (read with `ast`, nothing is
imported), which tests/test_architecture.py checks the code against: one table, read by both.

    .venv/bin/python scripts/architecture.py           # rewrite docs/architecture.md
    .venv/bin/python scripts/architecture.py --check   # exit 1, one line, if it is not current
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "autotune"
TEMPLATE = ROOT / "docs" / "architecture.in.md"
OUTPUT = ROOT / "docs" / "architecture.md"
UNPLACED = "(none)"


# --- The layers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    """A layer: the modules it holds (dotted prefixes) and the ones they may not import."""

    name: str
    modules: tuple[str, ...]
    forbids: tuple[str, ...]
    about: str


_UI = ("autotune.cli",)
_LOOP = (*_UI, "autotune.study", "autotune.search")

# Top to bottom. Dependencies point one way: cli -> study -> (search, measure, predict) ->
# (engine, bench, store, devices, space, ...); readers of results import the answer. `search`
# is the study's alone; `measure` knows no study; `predict` is a pure model of the engine.
LAYERS: tuple[Layer, ...] = (
    Layer("cli", ("autotune.cli",), (), "the commands; the only layer that prints"),
    Layer("study", ("autotune.study",), _UI, "the loop and a trial's life"),
    Layer(
        "search",
        ("autotune.search",),
        (*_UI, "autotune.study", "autotune.measure"),
        "how a study searches; used only by the study",
    ),
    Layer(
        "measure",
        ("autotune.measure",),
        (*_UI, "autotune.study", "autotune.search"),
        "one config's device work; no Optuna",
    ),
    Layer(
        "readers",
        ("autotune.dashboard", "autotune.doctor"),
        (*_LOOP, "autotune.measure"),
        "what reads finished studies and the host: the dashboard, `doctor`'s checks",
    ),
    Layer(
        "answer",
        ("autotune.answer",),
        (*_LOOP, "autotune.measure", "autotune.dashboard", "autotune.doctor"),
        "the answer a user deploys: the best trials, the exported YAML, sizing",
    ),
    Layer(
        "predict",
        ("autotune.predict",),
        (
            *_LOOP,
            "autotune.measure",
            "autotune.dashboard",
            "autotune.doctor",
            "autotune.answer",
            "autotune.store",
        ),
        "the engine model, fitted to records; no study, no store",
    ),
    Layer(
        "core",
        (
            "autotune.engine",
            "autotune.bench",
            "autotune.store",
            "autotune.devices",
            "autotune.space",
            "autotune.spec",
            "autotune.inputs",
            "autotune.vocab",
            "autotune.tiny",
        ),
        (
            *_LOOP,
            "autotune.measure",
            "autotune.dashboard",
            "autotune.doctor",
            "autotune.answer",
            "autotune.predict",
        ),
        "engine, load client, store, devices, search space, spec, inputs and vocabularies",
    ),
)

# A module of the key's prefix may not import one of these (what tests/test_architecture.py
# checks).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    prefix: layer.forbids for layer in LAYERS for prefix in layer.modules if layer.forbids
}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_of(module: str) -> str:
    """The name of the layer `module` belongs to, else UNPLACED."""
    for layer in LAYERS:
        if any(_inside(module, prefix) for prefix in layer.modules):
            return layer.name
    return UNPLACED


# --- The imports, read with ast ----------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One module imported by another, and the names taken from it (`from m import a, b`)."""

    importer: str
    module: str
    names: tuple[str, ...]
    line: int

    def __str__(self) -> str:
        names = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.importer}:{self.line} imports {self.module}{names}"


def module_files(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of `package` under `root` by dotted name (a package by its `__init__.py`)."""
    modules: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_package(module: str, modules: dict[str, Path]) -> bool:
    return modules[module].name == "__init__.py"


def _resolve(node: ast.ImportFrom, importer: str, modules: dict[str, Path]) -> str:
    """The absolute module a `from ... import` names, relative levels resolved."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not _is_package(importer, modules):
        base.pop()  # a module's level 1 is its package; a package's is itself
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """`name` or its longest prefix that is a module of the tree; None outside it."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def imports(root: Path, package: str = PACKAGE) -> Iterator[Import]:
    """Each import, anywhere in a module of `package`, of another module of the same tree.

    `from m import x` is an import of module `m.x` where that is a module, else of `m` taking
    the name `x`.
    """
    modules = module_files(root, package)
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if (target := _known(alias.name, modules)) is not None:
                        yield Import(importer, target, (), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(node, importer, modules)
                names: list[str] = []
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        yield Import(importer, f"{source}.{alias.name}", (), node.lineno)
                    else:
                        names.append(alias.name)
                if names and (target := _known(source, modules)) is not None:
                    yield Import(importer, target, tuple(names), node.lineno)


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules it imports. Importing `a.b.c` imports the packages `a.b` and `a`
    too (their `__init__` runs), except those that hold the importer itself."""
    graph: dict[str, set[str]] = {name: set() for name in module_files(root, package)}
    for imp in imports(root, package):
        parts = imp.module.split(".")
        for end in range(1, len(parts) + 1):
            target = ".".join(parts[:end])
            if target in graph and not _inside(imp.importer, target):
                graph[imp.importer].add(target)
        if imp.module != imp.importer:
            graph[imp.importer].add(imp.module)
    return graph


# --- The document ------------------------------------------------------------------------------


def summary(path: Path) -> str:
    """The first sentence of a module's docstring, on one line; empty without one."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return (paragraph if end < 0 else paragraph[: end + 1]).replace("|", "\\|")


def module_tables(root: Path) -> str:
    modules = module_files(root)
    packages = {m for m, p in modules.items() if p.name == "__init__.py" and m.count(".") == 1}
    groups: dict[str, list[str]] = {}
    for name in modules:
        if name == PACKAGE:
            continue
        parts = name.split(".")
        top = f"{parts[0]}.{parts[1]}"
        groups.setdefault(top if top in packages else "", []).append(name)
    out: list[str] = []
    for group in sorted(groups, key=lambda g: (g != "", g)):
        title = f"`{group.split('.')[1]}/`" if group else "Top-level modules"
        out += [
            f"### {title}",
            "",
            "| module | layer | lines | what it owns |",
            "|---|---|---|---|",
        ]
        for name in sorted(groups[group]):
            path = modules[name]
            lines = len(path.read_text(encoding="utf-8").splitlines())
            shown = path.relative_to(root / PACKAGE).as_posix()
            out.append(f"| `{shown}` | {layer_of(name)} | {lines} | {summary(path)} |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def layer_table(root: Path) -> str:
    graph = import_graph(root)
    uses: dict[str, set[str]] = {}
    for importer, imported in graph.items():
        for target in imported:
            a, b = layer_of(importer), layer_of(target)
            if a != b:
                uses.setdefault(a, set()).add(b)
    order = [layer.name for layer in LAYERS] + [UNPLACED]
    rank = {name: i for i, name in enumerate(order)}
    rows = ["| layer | holds | may not import | imports |", "|---|---|---|---|"]
    for layer in LAYERS:
        holds = ", ".join(f"`{m.removeprefix(PACKAGE + '.')}`" for m in layer.modules)
        forbids = ", ".join(f"`{m.removeprefix(PACKAGE + '.')}`" for m in layer.forbids) or "-"
        used = ", ".join(sorted(uses.get(layer.name, ()), key=rank.__getitem__)) or "-"
        rows.append(f"| {layer.name}: {layer.about} | {holds} | {forbids} | {used} |")
    unplaced = sorted(
        m.removeprefix(PACKAGE + ".")
        for m in graph
        if layer_of(m) == UNPLACED and m != PACKAGE and m.count(".") == 1
    )
    used = ", ".join(sorted(uses.get(UNPLACED, ()), key=rank.__getitem__)) or "-"
    holds = ", ".join(f"`{m}`" for m in unplaced)
    rows.append(f"| {UNPLACED}: not in a layer, no direction checked | {holds} | - | {used} |")
    return "\n".join(rows)


def render(root: Path = ROOT) -> str:
    """docs/architecture.md as the code makes it now."""
    template = (root / "docs" / TEMPLATE.name).read_text(encoding="utf-8")
    text = template.replace("{{layers}}", layer_table(root))
    return text.replace("{{modules}}", module_tables(root))


def first_difference(committed: str, fresh: str) -> str:
    """One line naming where `committed` differs from `fresh`."""
    old, new = committed.splitlines(), fresh.splitlines()
    for number, (a, b) in enumerate(zip(old, new, strict=False), start=1):
        if a != b:
            return f"line {number}: is {a[:80]!r}, would be {b[:80]!r}"
    return f"{len(old)} lines, would be {len(new)}"


def main(argv: list[str]) -> int:
    fresh = render()
    if argv == ["--check"]:
        committed = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if committed == fresh:
            return 0
        rel = OUTPUT.relative_to(ROOT)
        print(
            f"{rel} is stale ({first_difference(committed, fresh)}): "
            "run .venv/bin/python scripts/architecture.py",
            file=sys.stderr,
        )
        return 1
    if argv:
        print("usage: scripts/architecture.py [--check]", file=sys.stderr)
        return 2
    OUTPUT.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
