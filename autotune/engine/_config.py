"""The engine configuration: the one object that is launched, measured and exported."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
        """How many devices its engine uses: tensor x pipeline parallel."""
        return int(self.args.get("tensor_parallel_size", 1)) * int(
            self.args.get("pipeline_parallel_size", 1)
        )

    @property
    def api_model_name(self) -> str:
        """The model name a client must send."""
        return self.served_model_name or self.model
