"""The YAML the user writes (specs, search spaces, `--option` values), read strictly.

PyYAML's safe loader follows YAML 1.1: a key given twice silently keeps its last value
(`trials: 2` ... `trials: 50` runs 50), and `yes`, `no`, `on` and `off` are booleans
(`trials: yes` reads as 1, `remeasure: on` as true). Here a duplicate key is an error naming
both lines, and only `true` and `false` (any case, as in YAML 1.2) are booleans: `yes` stays
the text it is and the field that wants a number or a switch says so. A `vllm serve --config`
file is not read with this loader: vLLM reads it with PyYAML's own rules, and so does
`autotune.engine`.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")


class StrictLoader(yaml.SafeLoader):
    """SafeLoader without duplicate keys and with YAML 1.2's booleans."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
            if first is not None:
                raise ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"duplicate key {key!r} (first on line {first + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


# YAML 1.1's booleans out, YAML 1.2's in: the resolvers are copied, never shared with
# SafeLoader's (PyYAML keeps them in a class-level dict).
StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))


def load_yaml(text: str) -> Any:
    """`text` read with `StrictLoader` (raises yaml.YAMLError, with its marks)."""
    return yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass: safe


def yaml_problem(path: object, exc: yaml.YAMLError) -> str:
    """`PATH: invalid YAML at line L, column C: PROBLEM`, the one line a user reads for a file
    that is no YAML (a spec, a search space)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{path}: invalid YAML{where}: {exc.problem}"
    return f"{path}: invalid YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
