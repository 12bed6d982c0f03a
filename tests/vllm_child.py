"""One child process that imports vLLM once for the tests that ask vLLM's own parsers: each
import of it costs about 15 s of CPU on 2 cores, three such tests paid it three times, and
importing it into the test process itself would put torch's heap beside the clients other
tests time. Snippets run in it one after another, each with its own `sys.argv`; what a snippet
prints comes back as the stdout of a `CompletedProcess` (returncode 1 and the traceback as
stderr where it raised). vLLM logs to the real stdout, so replies carry a prefix of their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

REPLY = "@@vllm-child@@"
_SERVE = f"""
import contextlib, io, json, sys, traceback
for line in sys.stdin:
    request = json.loads(line)
    sys.argv = ["-c", *request["argv"]]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(request["code"], "<snippet>", "exec"), {{"__name__": "__main__"}})
        reply = {{"returncode": 0, "stdout": out.getvalue(), "stderr": ""}}
    except BaseException:
        reply = {{"returncode": 1, "stdout": out.getvalue(), "stderr": traceback.format_exc()}}
    sys.__stdout__.write({REPLY!r} + json.dumps(reply) + "\\n")
    sys.__stdout__.flush()
"""


class VllmChild:
    """The child, started at the first snippet; `close` ends it."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in close)

    def run(self, code: str, *argv: str) -> subprocess.CompletedProcess[str]:
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _SERVE],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            )  # fmt: skip
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"code": code, "argv": list(argv)}) + "\n")
        self._proc.stdin.flush()
        for line in self._proc.stdout:
            if line.startswith(REPLY):
                reply = json.loads(line[len(REPLY) :])
                return subprocess.CompletedProcess(
                    argv, reply["returncode"], reply["stdout"], reply["stderr"]
                )
        self._stderr.seek(0)
        return subprocess.CompletedProcess(argv, 1, "", "the child ended: " + self._stderr.read())

    def close(self) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=60)
        self._stderr.close()
