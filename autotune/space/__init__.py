"""Search spaces: the YAML format, its validation, sampling into engine configs, constraints.

```python
space = load_space("cpu")                      # or a path to a YAML file
params = space.suggest(trial)                  # or space.baseline_params() for trial 0
options, env = space.to_engine(params)         # vLLM options and env vars
problems = check_constraints(options, ModelInfo.from_path(model), platform=space.platform)
```
"""

from autotune.space._bounds import option_range_problem
from autotune.space._constraints import check_constraints
from autotune.space._errors import SpaceError
from autotune.space._host import (
    FP8_CPU_FLAGS,
    HOST_RULES,
    HostFacts,
    host_problem,
    restrict_to_command,
    restrict_to_host,
    with_vllm_defaults,
)
from autotune.space._layout import (
    LAYOUT_LIMIT,
    LAYOUT_OPTIONS,
    is_layout,
    layout_names,
    layout_plan,
    restrict_to_model,
)
from autotune.space._layout_rules import MOE_ONLY_OPTIONS
from autotune.space._loader import list_spaces, load_space
from autotune.space._memory import (
    MemoryEstimate,
    allocated_bytes,
    estimate_memory,
    weights_bytes,
)
from autotune.space._memory_order import (
    comparable,
    dominating_oom,
    memory_order,
    needs_at_least,
    repair,
)
from autotune.space._params import (
    CORES_PLACEHOLDER,
    BoolParam,
    CategoricalParam,
    FloatParam,
    IntParam,
    Parameter,
    value_problem,
)
from autotune.space._setting import ModelInfo, engine_default
from autotune.space._space import SearchSpace, env_string

__all__ = [
    "CORES_PLACEHOLDER",
    "FP8_CPU_FLAGS",
    "HOST_RULES",
    "LAYOUT_LIMIT",
    "LAYOUT_OPTIONS",
    "MOE_ONLY_OPTIONS",
    "BoolParam",
    "CategoricalParam",
    "FloatParam",
    "HostFacts",
    "IntParam",
    "MemoryEstimate",
    "ModelInfo",
    "Parameter",
    "SearchSpace",
    "SpaceError",
    "allocated_bytes",
    "check_constraints",
    "comparable",
    "dominating_oom",
    "engine_default",
    "env_string",
    "estimate_memory",
    "host_problem",
    "is_layout",
    "layout_names",
    "layout_plan",
    "list_spaces",
    "load_space",
    "memory_order",
    "needs_at_least",
    "option_range_problem",
    "repair",
    "restrict_to_command",
    "restrict_to_host",
    "restrict_to_model",
    "value_problem",
    "weights_bytes",
    "with_vllm_defaults",
]
