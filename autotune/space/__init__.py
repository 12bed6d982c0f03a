"""Search spaces: the YAML format, its validation, sampling into engine configs, constraints.

```python
space = load_space("cpu")                      # or a path to a YAML file
params = space.suggest(trial)                  # or space.baseline_params() for trial 0
options, env = space.to_engine(params)         # vLLM options and env vars
problems = check_constraints(options, ModelInfo.from_path(model), platform=space.platform)
```
"""

from autotune.space._constraints import ModelInfo, check_constraints
from autotune.space._errors import SpaceError
from autotune.space._loader import list_spaces, load_space
from autotune.space._params import (
    CORES_PLACEHOLDER,
    BoolParam,
    CategoricalParam,
    FloatParam,
    IntParam,
    Parameter,
)
from autotune.space._space import SearchSpace, env_string

__all__ = [
    "CORES_PLACEHOLDER",
    "BoolParam",
    "CategoricalParam",
    "FloatParam",
    "IntParam",
    "ModelInfo",
    "Parameter",
    "SearchSpace",
    "SpaceError",
    "check_constraints",
    "env_string",
    "list_spaces",
    "load_space",
]
