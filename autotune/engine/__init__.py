"""Engine configs, their argv/YAML spelling, and the subprocess launcher."""

from autotune.engine._args import (
    env_file_text,
    from_yaml_dict,
    option_argv,
    to_argv,
    to_yaml_dict,
    to_yaml_text,
)
from autotune.engine._config import EngineConfig
from autotune.engine._facts import EngineFacts, parse_facts
from autotune.engine._failures import (
    FATAL_OVERLAP,
    PATTERNS,
    Failure,
    FailureKind,
    classify_exit,
    classify_log,
    fatal_failure,
)
from autotune.engine._launcher import (
    DEFAULT_COMMAND,
    EngineError,
    LaunchSettings,
    RunningEngine,
    TeardownError,
    build_command,
    default_cores,
    group_members,
    launch,
    reap_stale_engine,
    resolve_env,
    terminate_group,
)
from autotune.engine._options import (
    cli_flag,
    is_known_option,
    known_options,
    normalize_option,
    suggest_option,
    yaml_key,
)
from autotune.engine._ports import free_port, port_is_free

__all__ = [
    "DEFAULT_COMMAND",
    "FATAL_OVERLAP",
    "PATTERNS",
    "EngineConfig",
    "EngineError",
    "EngineFacts",
    "Failure",
    "FailureKind",
    "LaunchSettings",
    "RunningEngine",
    "TeardownError",
    "build_command",
    "classify_exit",
    "classify_log",
    "cli_flag",
    "default_cores",
    "env_file_text",
    "fatal_failure",
    "free_port",
    "from_yaml_dict",
    "group_members",
    "is_known_option",
    "known_options",
    "launch",
    "normalize_option",
    "option_argv",
    "parse_facts",
    "port_is_free",
    "reap_stale_engine",
    "resolve_env",
    "suggest_option",
    "terminate_group",
    "to_argv",
    "to_yaml_dict",
    "to_yaml_text",
    "yaml_key",
]
