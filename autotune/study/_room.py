"""A study's room on its devices: what it has found free on each, and waiting for that room
when other processes hold it.

Before each trial (the baseline's included) the memory of the trial's devices is read; the
most found free on a device is the study's room there (with what its own started trials
needed, `Gate.memory_verdict`). A config that fits the room but not what is free now is not
predicted out of memory: another job's engine holds the rest (or one still being released).
The trial waits for it, up to `wait_s`, reading again every `poll_s`, with one warning line;
a wait that runs out is the host's fault (`environment`), never the config's OOM.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from autotune.devices import DeviceMemory
from autotune.study._gate import DeviceRoom, SkipRule, Verdict

logger = logging.getLogger(__name__)

Read = Callable[[list[int] | None], DeviceMemory | None]


@dataclass
class Rooms:
    """The study's readings of its devices' memory, and the most each had free (one per
    study run, shared by its lanes). `cancel` ends a wait as Ctrl-C does; `clock` (seconds)
    is injected for tests."""

    read: Read
    wait_s: float
    poll_s: float
    cancel: threading.Event
    clock: Callable[[], float] = time.monotonic
    _most_free: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def room(self, ids: list[int] | None) -> DeviceRoom | None:
        """The trial's devices now (`ids`: its lease; None: the first device), and the most
        this study has found free there, this reading included; None: unknown."""
        memory = self.read(ids)
        if memory is None:
            return None
        with self._lock:
            most = max(self._most_free.get(memory.device, 0), memory.available_bytes)
            self._most_free[memory.device] = most
        return DeviceRoom(memory, most)

    def wait(
        self, ids: list[int] | None, judge: Callable[[DeviceRoom | None], Verdict], trial: int
    ) -> tuple[Verdict, DeviceRoom | None]:
        """`judge`'s verdict on the room of `ids`; while it is to wait (`SkipRule.BUSY`), read
        again until it is not or `wait_s` has passed (the waiting verdict then, saying so).
        Raises KeyboardInterrupt when the study is cancelled meanwhile."""
        room = self.room(ids)
        verdict = judge(room)
        if verdict.rule != SkipRule.BUSY:
            return verdict, room
        start = self.clock()
        logger.warning("trial %d waits up to %.0f s: %s", trial, self.wait_s, verdict.reason)
        while self.clock() - start < self.wait_s:
            if self.cancel.wait(self.poll_s):
                raise KeyboardInterrupt
            room = self.room(ids)
            verdict = judge(room)
            if verdict.rule != SkipRule.BUSY:
                waited = self.clock() - start
                logger.info("trial %d: memory came free after %.0f s", trial, waited)
                return verdict, room
        reason = f"not launched: {verdict.reason}; waited {self.wait_s:.0f} s for it"
        return replace(verdict, reason=reason), room
