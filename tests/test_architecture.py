"""The package's shape, checked from its source: no import cycle, no module over 450 lines, and
no private name or private module used from outside where it lives.

The checker is a few functions over a source root (the folder that holds the package), so each
check is first shown to catch what it looks for on a small synthetic tree, then run on the real
`autotune/`. Imports are read with `ast`, wherever they stand (function-level and
`TYPE_CHECKING` ones included), since an import placed in a function still ties two modules.
The layers and that reader live in scripts/architecture.py, which writes docs/architecture.md
from the same table; the last test checks that the page is current.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450


def _script(name: str) -> ModuleType:
    """`scripts/NAME.py`, loaded by its path (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# The layers and the reader of imports live with the script that writes docs/architecture.md
# from them, so that the page and these checks read one table.
architecture = _script("architecture")
PACKAGE: str = architecture.PACKAGE
FORBIDDEN: dict[str, tuple[str, ...]] = architecture.FORBIDDEN
module_files = architecture.module_files
imports = architecture.imports
import_graph = architecture.import_graph
_inside = architecture._inside


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted, in name order
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One closed import path through a component's first module: `[a, b, ..., a]`."""
    members, start = set(component), component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if succ not in parents:
                    parents[succ] = node
                    following.append(succ)
        frontier = following
    raise ValueError(f"{component} is not a cycle")


def long_modules(root: Path, package: str = PACKAGE, limit: int = MAX_LINES) -> list[str]:
    """`module: N lines` for each module over `limit` lines."""
    found = []
    for name, path in module_files(root, package).items():
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > limit:
            found.append(f"{name} ({path.relative_to(root)}): {count} lines")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(root: Path, package: str = PACKAGE) -> list[str]:
    """Private names imported from another module, and private modules (`a.b._m`) imported from
    outside their package `a.b` (a package's own modules may import each other)."""
    found = []
    for imp in imports(root, package):
        private_names = [n for n in imp.names if _private(n)]
        if private_names and imp.module != imp.importer:
            found.append(f"{imp}: private name {', '.join(private_names)}")
        parts = imp.module.split(".")
        first = next((i for i, part in enumerate(parts) if _private(part)), None)
        if first is not None and not _inside(imp.importer, ".".join(parts[:first])):
            found.append(f"{imp}: private module of {'.'.join(parts[:first])}")
    return found


# --- The checker on synthetic trees ----------------------------------------------------------


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_graph_reads_every_kind_of_import(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "autotune/top.py": "import autotune.a.b as ab\nimport json\n",
            "autotune/a/__init__.py": "from autotune.a._impl import thing\n",
            "autotune/a/_impl.py": "from . import b\nfrom .b import x\nthing = 1\n",
            "autotune/a/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from ..top import y\n"
                "def f():\n    from autotune import c\n    return c\nx = 1\n"
            ),
            "autotune/c.py": "",
        },
    )
    graph = import_graph(tmp_path)
    assert graph["autotune.top"] == {"autotune.a", "autotune.a.b"}  # the package, not json
    assert graph["autotune.a"] == {"autotune.a._impl"}
    assert graph["autotune.a._impl"] == {"autotune.a.b"}  # its own package is not implied
    assert graph["autotune.a.b"] == {"autotune.top", "autotune.c"}  # function-level too
    assert graph["autotune.c"] == set()


def test_a_cycle_is_found_and_named(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "autotune/a.py": "def f():\n    from autotune.b import g\n",
            "autotune/b.py": "from autotune.c import h\n",
            "autotune/c.py": "import autotune.a\n",
            "autotune/d.py": "from autotune import a\n",
            # Through a package's __init__: p/x imports q.y, whose package imports p.
            "autotune/p/__init__.py": "from autotune.p.x import X\n",
            "autotune/p/x.py": "from autotune.q.y import Y\nX = 1\n",
            "autotune/q/__init__.py": "from autotune.p import X\n",
            "autotune/q/y.py": "Y = 1\n",
        },
    )
    graph = import_graph(tmp_path)
    found = cycles(graph)
    assert found == [
        ["autotune.a", "autotune.b", "autotune.c"],
        ["autotune.p", "autotune.p.x", "autotune.q"],
    ]
    assert cycle_path(graph, found[0]) == ["autotune.a", "autotune.b", "autotune.c", "autotune.a"]


def test_no_cycle_in_a_layered_tree(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "autotune/low/__init__.py": "from autotune.low._m import M\n",
            "autotune/low/_m.py": "from autotune.low import _n\nM = 1\n",
            "autotune/low/_n.py": "",
            "autotune/high.py": "from autotune.low import M\n",
        },
    )
    assert cycles(import_graph(tmp_path)) == []


def test_a_long_module_is_found(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "autotune/ok.py": "x = 1\n" * MAX_LINES,
            "autotune/sub/long.py": "x = 1\n" * (MAX_LINES + 1),
        },
    )
    assert long_modules(tmp_path) == [
        f"autotune.sub.long (autotune/sub/long.py): {MAX_LINES + 1} lines"
    ]


def test_private_imports_are_found(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "autotune/a/__init__.py": "from autotune.a._m import public\n__all__ = ['public']\n",
            "autotune/a/_m.py": "public = 1\n_hidden = 2\n",
            # Allowed: a package's own modules import each other's modules, public names.
            "autotune/a/_n.py": "from autotune.a._m import public\nfrom . import _m\n",
            # Not allowed: a private name, even from a sibling module (relative or not).
            "autotune/a/_o.py": "from ._m import _hidden\n",
            "autotune/b.py": (
                "from autotune.a import public, __all__\n"  # the API, and a dunder: allowed
                "def f():\n    from autotune.a._m import public\n"  # a private module
                "import autotune.a._m\n"
                "from autotune.a import _m\n"
            ),
        },
    )
    assert private_imports(tmp_path) == [
        "autotune.a._o:1 imports autotune.a._m (_hidden): private name _hidden",
        "autotune.b:3 imports autotune.a._m (public): private module of autotune.a",
        "autotune.b:4 imports autotune.a._m: private module of autotune.a",
        "autotune.b:5 imports autotune.a._m: private module of autotune.a",
    ]


# --- The checks on autotune/ -----------------------------------------------------------------


def test_no_import_cycle() -> None:
    graph = import_graph(ROOT)
    found = cycles(graph)
    report = "\n".join(f"{', '.join(c)}\n  e.g. {' -> '.join(cycle_path(graph, c))}" for c in found)
    assert not found, f"import cycles between modules:\n{report}"


def test_no_module_over_450_lines() -> None:
    found = long_modules(ROOT)
    assert not found, "modules over 450 lines (split them):\n" + "\n".join(found)


def test_no_private_import_across_modules() -> None:
    found = private_imports(ROOT)
    assert not found, (
        "private names or modules imported from outside (export them from the package's "
        "__init__.py):\n" + "\n".join(found)
    )


@pytest.mark.parametrize("module", ["autotune.devices", "autotune.space", "autotune.engine"])
def test_the_real_graph_is_read(module: str) -> None:
    """A sanity check that the checks above look at real edges, not at an empty graph."""
    graph = import_graph(ROOT)
    assert graph.get(module), f"{module} imports nothing?"


def layer_breaches(graph: dict[str, set[str]]) -> list[str]:
    """`importer -> imported` edges that point up a layer (see FORBIDDEN, in
    scripts/architecture.py)."""
    found = []
    for importer, imported in sorted(graph.items()):
        for layer, above in FORBIDDEN.items():
            if importer != layer and not importer.startswith(layer + "."):
                continue
            for target in sorted(imported):
                if any(target == a or target.startswith(a + ".") for a in above):
                    found.append(f"{importer} -> {target}")
    return found


def test_a_layer_breach_is_found() -> None:
    graph = {
        "autotune.answer.export": {"autotune.study._runner"},
        "autotune.cli._x": {"autotune.study"},
    }
    assert layer_breaches(graph) == ["autotune.answer.export -> autotune.study._runner"]


def test_only_the_study_searches() -> None:
    """`autotune.search` (samplers, what they are told) has one user: the study."""
    graph = import_graph(ROOT)
    users = sorted(
        importer
        for importer, imported in graph.items()
        if not importer.startswith(("autotune.search", "autotune.study"))
        and any(t == "autotune.search" or t.startswith("autotune.search.") for t in imported)
    )
    assert users == [], f"autotune.search imported outside autotune.study: {users}"


def third_party(root: Path, package: str) -> dict[str, set[str]]:
    """Module of `package` -> the top-level names of what it imports from outside the tree."""
    out: dict[str, set[str]] = {}
    for name, path in module_files(root, PACKAGE).items():
        if not _inside(name, package):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
        out[name] = found - {PACKAGE}
    return out


def test_measure_knows_no_optuna() -> None:
    """One config's device work runs without a study: nothing in `autotune.measure` imports
    Optuna (benchmarks and `profile` drive it directly). The search does, as it must."""
    measure = third_party(ROOT, "autotune.measure")
    assert "autotune.measure._measure" in measure
    assert [m for m, names in sorted(measure.items()) if "optuna" in names] == []
    assert any("optuna" in names for names in third_party(ROOT, "autotune.search").values())


def test_dependencies_point_one_way() -> None:
    found = layer_breaches(import_graph(ROOT))
    assert not found, "imports against the layers:\n" + "\n".join(found)


# A study's attributes are read and written through `StudyFacts` alone (autotune/store/_study.py):
# no other module takes them by key from a store (a `.study_attrs(` dict, as a removed shim
# gave scripts) or an Optuna study (`study.user_attrs`, `study.set_user_attr`). A trial's are
# `TrialRecord` / `TrialFacts`'.
STUDY_ATTRS_OWNER = "autotune.store._study"
STUDY_ATTRS = re.compile(r"\.study_attrs\(|\b\w*study\w*\.(?:user_attrs|set_user_attr)\b")


def study_attr_readers(root: Path, package: str = PACKAGE) -> list[str]:
    """`module:line: text` for each read or write of a study's attributes by key outside
    STUDY_ATTRS_OWNER."""
    found = []
    for name, path in module_files(root, package).items():
        if name == STUDY_ATTRS_OWNER:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if STUDY_ATTRS.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    return found


def test_a_study_attribute_read_by_key_is_found(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "autotune/store/_study.py": "x = study.user_attrs\n",
            "autotune/a.py": "spec = store.study_attrs(name)['spec']\n",
            "autotune/b.py": "bounds = event.study.user_attrs.get('slos')\n",
            "autotune/c.py": "study.set_user_attr('slos', {})\n",
            "autotune/d.py": "role = trial.user_attrs.get('role')\nf = store.study_facts(n)\n",
        },
    )
    found = [line.split(":")[0] for line in study_attr_readers(root)]
    assert found == ["autotune.a", "autotune.b", "autotune.c"]


def test_one_module_reads_the_study_attributes() -> None:
    found = study_attr_readers(ROOT)
    assert not found, (
        f"study attributes read or written by key outside {STUDY_ATTRS_OWNER} (use "
        "StudyFacts.of / store.study_facts / write_study):\n" + "\n".join(found)
    )


# One SLO type, `autotune.vocab.slo.Slo` (metric, bound or factor of the baseline, how it is judged,
# its text): no other module defines an SLO class, names the constraints that are no SLO's,
# or words a relative bound.
SLO_OWNER = "autotune.vocab.slo"
SLO_SHAPES = re.compile(
    r"^class \w*Slos?\b|^(?:NOT_SLOS|FAILED|OOM|ERROR_RATE|AGREEMENT)\b\s*[:=]|<= baseline x",
    re.MULTILINE,
)


def slo_shapes(root: Path, package: str = PACKAGE) -> list[str]:
    """`module: text` for each SLO type, constraint name or SLO text outside SLO_OWNER."""
    return [
        f"{name}: {match[0]}"
        for name, path in module_files(root, package).items()
        if name != SLO_OWNER
        for match in SLO_SHAPES.finditer(path.read_text(encoding="utf-8"))
    ]


def test_a_second_slo_shape_is_found(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "autotune/vocab/slo.py": "class Slo:\n    pass\nFAILED = 'failed'\n",
            "autotune/a.py": "class TrialSlo:\n    pass\n",
            "autotune/b.py": "NOT_SLOS = ('failed', 'oom')\n",
            "autotune/c.py": "text = f'{name} <= baseline x {factor:g}'\n",
            "autotune/d.py": "class SloBasis:\n    pass\nslos = bounds_of(x)\n",
        },
    )
    found = [line.split(":")[0] for line in slo_shapes(root)]
    assert found == ["autotune.a", "autotune.b", "autotune.c"]


def test_one_slo_type() -> None:
    found = slo_shapes(ROOT)
    assert not found, (
        f"an SLO's type, constraint names or text outside {SLO_OWNER} (use autotune.vocab.slo):\n"
        + "\n".join(found)
    )


# Nothing mutates a container held by a frozen object: a frozen dataclass or pydantic model is
# built whole (its lists and dicts made first, then passed in), and a changed value is a new
# object (`dataclasses.replace`, `model_copy`), so no holder sees it change under it.
MUTABLE = {"dict", "list", "set", "defaultdict"}
MUTATORS = {"update", "append", "extend", "pop", "popitem", "clear", "setdefault", "insert"}
MUTATORS |= {"remove", "add", "discard", "sort", "reverse"}
# Classes named like a frozen one's field but mutable by design, each with why.
IN_PLACE_ALLOWED = {
    "autotune.engine._serve_import": "ServeCommand, the mutable result a parser fills",
}


def _is_frozen(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call) and any(
            k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in decorator.keywords
        ):
            return True
    return any(
        isinstance(st, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "model_config" for t in st.targets)
        and "frozen=True" in ast.unparse(st.value)
        for st in node.body
    )


def frozen_containers(root: Path, package: str = PACKAGE) -> set[str]:
    """The names of the fields of frozen classes that are typed as a mutable container."""
    names = set()
    for path in module_files(root, package).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and _is_frozen(node):
                for st in node.body:
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        typed = {n.id for n in ast.walk(st.annotation) if isinstance(n, ast.Name)}
                        if typed & MUTABLE:
                            names.add(st.target.id)
    return names


def changes_in_place(root: Path, package: str = PACKAGE) -> list[str]:
    """`module:line: code` for each item set, deleted or method called that changes in place
    a container reached as `x.field`, where `field` is a frozen class's container field."""
    fields = frozen_containers(root, package)
    found = []
    for name, path in module_files(root, package).items():
        if name in IN_PLACE_ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            held: list[ast.expr] = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                held = [t.value for t in node.targets if isinstance(t, ast.Subscript)]
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript):
                held = [node.target.value]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                held = [node.func.value] if node.func.attr in MUTATORS else []
            if any(isinstance(h, ast.Attribute) and h.attr in fields for h in held):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_a_change_in_place_of_a_frozen_objects_container_is_found(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "autotune/m.py": (
                "from dataclasses import dataclass\n"
                "@dataclass(frozen=True)\nclass P:\n    slos: dict[str, float]\n"
                "    n: int\n"
                "class S(BaseModel):\n    model_config = ConfigDict(frozen=True)\n"
                "    outputs: list[int]\n"
            ),
            "autotune/a.py": "plan.slos['x'] = 1.0\n",
            "autotune/b.py": "ref.outputs[:] = new\n",
            "autotune/c.py": "spec.slos.update(other)\n",
            "autotune/d.py": "slos = dict(plan.slos)\nslos['x'] = 1.0\nplan.n = 2\nx.outputs\n",
        },
    )
    found = [line.split(":")[0] for line in changes_in_place(root)]
    assert found == ["autotune.a", "autotune.b", "autotune.c"]


def test_no_frozen_objects_container_changes_in_place() -> None:
    found = changes_in_place(ROOT)
    assert not found, (
        "a container of a frozen object changed in place (build it whole, or make a new "
        "object with dataclasses.replace / model_copy):\n" + "\n".join(found)
    )


PLATFORM_WORDS = frozenset({"ascend", "cuda", "cpu", "npu"})
PLATFORM_OWNER = "autotune.vocab.platform"


def _platform_named(node: ast.expr) -> bool:
    """A name or attribute that holds a platform by its name: `platform`, `space.platform`."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return "platform" in name.lower()


def _platform_words(node: ast.expr) -> bool:
    """A string constant of PLATFORM_WORDS, or a tuple, list or set holding one (`in (...)`)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return any(isinstance(i, ast.Constant) and i.value in PLATFORM_WORDS for i in items)


def bare_platform_compares(root: Path, package: str = PACKAGE) -> list[str]:
    """`module:line` for each comparison of a platform with a bare string.

    The platform is one typed value, `autotune.vocab.platform.Platform`; code compares with
    its members (`platform == Platform.CPU`). Narrow on purpose, so that it never flags a
    "cpu" that is a torch device or a vLLM option value: a `Compare` is flagged only where
    one side is a name or attribute whose name contains "platform" and another side is one of
    the words "ascend", "cuda", "cpu", "npu" (or a tuple, list or set holding one). "any", a
    space's platform for whichever accelerator the host has, is not a platform member and is
    left alone; so are `sys.platform` checks, which compare with other words.
    """
    found = []
    for name, path in module_files(root, package).items():
        if name == PLATFORM_OWNER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(_platform_named(s) for s in sides) and any(_platform_words(s) for s in sides):
                found.append(f"{name}:{node.lineno}")
    return found


def test_a_bare_platform_compare_is_found(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "autotune/a.py": "if platform == 'cpu':\n    pass\n",
            "autotune/b.py": "ok = space.platform in ('cuda', 'any')\n",
            "autotune/c.py": "ok = 'npu' != inventory.platform\n",
            "autotune/d.py": "ok = platform == Platform.CPU or platform == 'any'\n",
            "autotune/e.py": "ok = device == 'cpu' or sys.platform == 'linux'\n",
        },
    )
    assert bare_platform_compares(root) == ["autotune.a:1", "autotune.b:1", "autotune.c:1"]


def test_the_platform_is_compared_by_its_members() -> None:
    found = bare_platform_compares(ROOT)
    assert not found, (
        "a platform compared with a bare string (use autotune.vocab.platform.Platform):\n"
        + "\n".join(found)
    )


# Each public name is defined once in the package: two things of one name mislead a reader
# (and an import picks one silently). A definition is a top-level class or function, or a
# module-level assignment to a CamelCase name (a type alias); imports (re-exports) are not, nor
# constants (`__all__`, `GIB`). The allowed ones, each with why:
SAME_NAME_ALLOWED: dict[str, str] = {
    "main": "each entry point's conventional name (console script, `python -m` module)",
    "make_tiny_model": "the CLI command is named as the function it runs (typer takes the name)",
}
CAMEL_CASE = re.compile(r"^[A-Z]\w*[a-z]\w*$")


def definitions(root: Path, package: str = PACKAGE) -> dict[str, list[str]]:
    """Public name -> the modules that define it at their top level."""
    found: dict[str, list[str]] = {}
    for module, path in module_files(root, package).items():
        for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
            names: list[str] = []
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names = [node.name]
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [
                    t.id for t in targets if isinstance(t, ast.Name) and CAMEL_CASE.match(t.id)
                ]
            for name in names:
                if not name.startswith("_"):
                    found.setdefault(name, []).append(module)
    return found


def defined_twice(root: Path, package: str = PACKAGE) -> list[str]:
    """`name: module, module` for each public name defined in more than one module."""
    return [
        f"{name}: {', '.join(modules)}"
        for name, modules in sorted(definitions(root, package).items())
        if len(modules) > 1 and name not in SAME_NAME_ALLOWED
    ]


def test_a_name_defined_twice_is_found(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "autotune/__init__.py": "from autotune.a import Thing\n__all__ = ['Thing']\n",
            "autotune/a.py": "class Thing:\n    pass\ndef read(): ...\nGIB = 1\n_x = 1\n",
            "autotune/b.py": "Thing = tuple[str, str]\nasync def read(): ...\nGIB = 2\n_x = 2\n",
            "autotune/c.py": "from autotune.a import Thing, read\nclass _Private: ...\n",
            "autotune/d.py": "class _Private: ...\ndef main(): ...\n",
            "autotune/e.py": "Item: type = int\ndef main(): ...\n",
            "autotune/f.py": "def f():\n    class Item: ...\n",  # not top-level
        },
    )
    assert defined_twice(root) == ["Thing: autotune.a, autotune.b", "read: autotune.a, autotune.b"]


def test_each_public_name_is_defined_once() -> None:
    found = defined_twice(ROOT)
    assert not found, (
        "public names defined in two modules (rename the one that says less about what it is, "
        "or import the one definition):\n" + "\n".join(found)
    )


def test_no_test_module_imports_another() -> None:
    # Issue 33: shared stand-ins live in helper modules (tests/builders.py, study/fakes.py,
    # devices/fake_host.py) or conftests, never in a test module another one imports.
    pattern = re.compile(r"^\s*from\s+(?:tests\.)?([\w.]*\btest_\w+)\s+import", re.MULTILINE)
    found = [
        f"{path.relative_to(ROOT)}: {match[1]}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for match in pattern.finditer(path.read_text())
    ]
    assert not found, found


def test_the_architecture_page_is_current() -> None:
    """docs/architecture.md is written from the code (layers, modules, line counts, what each
    owns): a module added, grown or renamed makes it stale."""
    committed = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    fresh = architecture.render(ROOT)
    assert committed == fresh, (
        f"docs/architecture.md is stale ({architecture.first_difference(committed, fresh)}): "
        "run .venv/bin/python scripts/architecture.py"
    )
