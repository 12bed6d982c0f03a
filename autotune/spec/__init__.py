"""TuneSpec: everything a tuning study needs, read from `--spec tune.yaml` and the CLI's flags
and validated once, at the edge (`load_spec`).

The spec file as the user wrote it (`_file`), the flags' spellings (`_flags`), how engines
start (`_engine`), what one request may not ask at once (`_request`), and a validation error
as one line (`_errors`). Nothing below the CLI parses strings or reads the environment: it
receives a TuneSpec.
"""

from autotune.spec._engine import EngineSpec
from autotune.spec._errors import SpecError, describe_spec_error
from autotune.spec._file import (
    OFFLINE_ENGINE_COMMAND,
    SPEC_LIMIT,
    path_field_problem,
    read_spec_file,
    storage_problem,
)
from autotune.spec._flags import (
    parse_objectives,
    parse_pairs,
    parse_precision,
    parse_relative,
    parse_slos,
)
from autotune.spec._request import check_request
from autotune.spec._spec import TuneSpec, load_spec

__all__ = [
    "OFFLINE_ENGINE_COMMAND",
    "SPEC_LIMIT",
    "EngineSpec",
    "SpecError",
    "TuneSpec",
    "check_request",
    "describe_spec_error",
    "load_spec",
    "parse_objectives",
    "parse_pairs",
    "parse_precision",
    "parse_relative",
    "parse_slos",
    "path_field_problem",
    "read_spec_file",
    "storage_problem",
]
