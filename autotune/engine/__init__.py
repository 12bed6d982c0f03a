"""Engine configs, their argv/YAML spelling, and the subprocess launcher."""

from autotune.engine._config import EngineConfig
from autotune.engine._options import (
    cli_flag,
    is_known_option,
    known_options,
    normalize_option,
    suggest_option,
    yaml_key,
)

__all__ = [
    "EngineConfig",
    "cli_flag",
    "is_known_option",
    "known_options",
    "normalize_option",
    "suggest_option",
    "yaml_key",
]
