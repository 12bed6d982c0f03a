"""Shared-memory cleanup: only the engine's own segments, and only once nobody uses them."""

from __future__ import annotations

import os
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

from autotune.engine._cleanup import SHM_DIR, remove_leaked_shm, shm_used_by


def segment() -> shared_memory.SharedMemory:
    shm = shared_memory.SharedMemory(create=True, size=4096)
    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    return shm


def test_segments_mapped_by_a_process_are_seen() -> None:
    shm = segment()
    try:
        assert SHM_DIR / shm.name in shm_used_by([os.getpid()])
    finally:
        shm.close()
        (SHM_DIR / shm.name).unlink()


def test_only_known_unused_segments_are_removed() -> None:
    in_use, leaked, stranger = segment(), segment(), segment()
    leaked.close()  # its process is gone: nobody maps it any more
    stranger.close()  # another engine's, not seen in ours
    paths = {name: SHM_DIR / s.name for name, s in
             (("in_use", in_use), ("leaked", leaked), ("stranger", stranger))}  # fmt: skip
    try:
        removed = remove_leaked_shm({paths["in_use"], paths["leaked"], Path("/tmp/psm_x")})
        assert removed == [paths["leaked"]]
        assert paths["in_use"].exists() and paths["stranger"].exists()
    finally:
        in_use.close()
        for path in paths.values():
            path.unlink(missing_ok=True)
