"""The engine command a user gives (`--engine-command`, the spec's `engine.command` and
`engine.offline_command`), judged before a study exists: what its words say, and whether this
host has the program it starts. Each missed case used to create the study and fail at its
first launch (issue 49): a typo'd placeholder reached the server as text, one placeholder
without the others left the server on its default port or without its config, a program not
on PATH or a module not installed died at once."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

from autotune.inputs.wording import did_you_mean, shown

PYTHON = "{python}"
# Where the launcher puts a server's config, host and port; with none of them named, it
# appends `--config`, `--host` and `--port`.
SERVER_PLACEHOLDERS = ("{config}", "{port}", "{host}")
# Where the offline batch program gets its config, prompts and result file.
OFFLINE_PLACEHOLDERS = ("{config}", "{prompts}", "{out}")

_NAMED = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")  # `{prot}`, not `${VAR}` or JSON
# A shell would read these; the launcher runs the words as they are, so they reach the program.
_SHELL_WORDS = frozenset({"&&", "||", "|", ";", "&"})
_REDIRECT = re.compile(r"^\d*(>>?|<)(&\d*)?")
# What the launcher gives every trial in its config (the model) or as its own flags.
_LAUNCHER_FLAGS = ("--model", "--config", "--host", "--port")


def command_problem(template: str, placeholders: tuple[str, ...]) -> str | None:
    """Why `template` cannot start what the launcher expects (None: it can, as far as its
    words tell): a placeholder it does not know, a placeholder given twice, some of
    `placeholders` named and the others not, a shell operator, or a flag the launcher sets."""
    words = shlex.split(template)  # the caller has checked that it splits
    known = (PYTHON, *placeholders)
    for match in _NAMED.finditer(template):
        name = "{" + match.group(1) + "}"
        if name not in known:
            return (
                f"{name} is not a placeholder{did_you_mean(name, known)}; the command's are "
                f"{', '.join(known)}"
            )
    named = [p for p in placeholders if p in template]
    for name in named:
        if template.count(name) > 1:
            return f"{name} appears {template.count(name)} times: name each placeholder once"
    if named and len(named) < len(placeholders):
        missing = " and ".join(p for p in placeholders if p not in named)
        flags = ", ".join(f"--{p.strip('{}')}" for p in placeholders)
        return (
            f"names {', '.join(named)} but not {missing}: with one of them named, no flag is "
            f"appended for the others; name all of {', '.join(placeholders)}, or none ({flags} "
            "are then appended)"
        )
    for word in words:
        if word in _SHELL_WORDS or _REDIRECT.match(word):
            return (
                f"{word!r} is a shell operator, but the command is not run by a shell (the "
                "program would get it as an argument); put the shell line in a script and give "
                "the script"
            )
    for word in words:
        flag = word.split("=", 1)[0]
        if flag in _LAUNCHER_FLAGS and f"{{{flag[2:]}}}" not in word + " " + template:
            return (
                f"gives {flag} itself: each trial's model, config, host and port are the "
                f"tuner's (the model is --model; the others it chooses per trial)"
            )
    return None


def program_problem(template: str) -> str | None:
    """Why this host cannot run the program `template` starts (None: it can, as far as a
    look tells): no such file, not executable, not found on PATH, a script of the tuner's
    Python that does not exist, or `{python} -m MODULE` of a module it cannot import."""
    words = shlex.split(template.replace(PYTHON, shlex.quote(sys.executable)))
    program = words[0]
    if "{" in program:
        return None  # a placeholder as the program: the launcher's to fill
    if "/" in program:
        path = Path(program).expanduser()
        if not path.is_file():
            return f"{shown(program)}: {'is a folder' if path.is_dir() else 'no such file'}"
        if not os.access(path, os.X_OK):
            return (
                f"{shown(program)}: not executable (chmod +x it, or start it with its interpreter)"
            )
    elif shutil.which(program) is None:
        return f"{shown(program)}: no such program on PATH"
    if program != sys.executable or len(words) < 2:
        return None
    if words[1] == "-m" and len(words) > 2:
        package = words[2].split(".")[0]
        if importlib.util.find_spec(package) is None:  # located, not imported
            return f"-m {shown(words[2])}: {sys.executable} has no module named {package!r}"
    elif not words[1].startswith("-") and "{" not in words[1] and not Path(words[1]).is_file():
        return f"{shown(words[1])}: no such script"
    return None
