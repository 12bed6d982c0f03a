"""The engine configuration: the one object that is launched, measured and exported."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# The parallel sizes whose product is the number of devices an engine holds (vLLM 0.32's
# `ParallelConfig`: world size = PP x TP x PCP, and each of DP ranks runs a world of its own,
# `world_size_across_dp`). Decode context parallel is not among them: it reuses the TP ranks.
DEVICE_FACTORS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "prefill_context_parallel_size",
    "data_parallel_size",
)


def devices_of(options: Mapping[str, Any]) -> int:
    """How many devices an engine of `options` holds: TP x PP x PCP x DP (1 where unset)."""
    count = 1
    for name in DEVICE_FACTORS:
        count *= int(options.get(name) or 1)
    return count


class EngineConfig(BaseModel):
    """A complete vLLM serving configuration.

    `args` holds vLLM engine/server options by their Python names (`max_num_seqs`), exactly as
    they are passed to the engine; `env` holds environment variables of the engine processes.
    What a trial launches is what `export` writes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="Model path or name, as vLLM's `model` option")
    served_model_name: str | None = Field(default=None, description="Name clients send")
    args: dict[str, Any] = Field(default_factory=dict, description="vLLM options, snake_case")
    env: dict[str, str] = Field(default_factory=dict, description="Engine environment variables")

    @property
    def devices(self) -> int:
        """How many devices its engine holds: TP x PP x PCP x DP (`devices_of`)."""
        return devices_of(self.args)

    @property
    def api_model_name(self) -> str:
        """The model name a client must send."""
        return self.served_model_name or self.model
