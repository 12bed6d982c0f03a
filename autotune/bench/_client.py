"""The load client: sends requests to an OpenAI-compatible server and times every token."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any, Literal, Protocol, get_args

import httpx

from autotune.bench._guard import AbortCause, BenchmarkAborted, Guard
from autotune.bench._http import AiohttpLines, HTTPStreamError, HttpxLines, LineStream
from autotune.bench._load import LoadProfile
from autotune.bench._records import RequestRecord
from autotune.bench._workload import RequestSpec

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[Any]]

# The load clients a study may measure with (`--load-client`): the project's own streaming
# client, or vLLM's reference client `vllm bench serve` (bench/_vllm_bench.py).
LoadClientName = Literal["autotune", "vllm-bench"]
LOAD_CLIENTS: tuple[str, ...] = get_args(LoadClientName)


class LoadClientError(RuntimeError):
    """The load client itself failed (not one request): the trial has no measurement."""


class LoadClient(Protocol):
    """Sends requests under a load profile and returns one record per measured request.

    Contract: `warmup` requests are sent first under the same profile, awaited, and left out
    of the result, and `before_measured` (when given) is called between the two; the result
    holds one record per request of `requests`, in their order
    (`record.index` is the position); a failed request becomes a record with `error` set, and
    `run` never raises for a request's failure. With a `guard`, the run stops as soon as the
    guard says so (a dead engine, a hang, an overrun) and raises `BenchmarkAborted` holding the
    records so far, unfinished requests errored.
    """

    async def run(
        self,
        requests: Sequence[RequestSpec],
        profile: LoadProfile,
        *,
        warmup: Sequence[RequestSpec] = (),
        guard: Guard | None = None,
        before_measured: Callable[[], None] | None = None,
    ) -> list[RequestRecord]: ...


class StreamError(Exception):
    """The server's stream broke the protocol or reported an error."""


class _Stream:
    """State of one SSE completion stream, fed one line at a time."""

    def __init__(self) -> None:
        self.token_times: list[float] = []
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.done = False

    def feed(self, line: str, now: float) -> None:
        line = line.strip()
        if not line.startswith("data:"):
            return  # blank separators, comments, `event:`/`id:` fields
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError:
            raise StreamError(f"bad SSE payload: {payload[:100]!r}") from None
        if not isinstance(chunk, dict):
            raise StreamError(f"bad SSE payload: {payload[:100]!r}")
        if chunk.get("error"):
            raise StreamError(f"server error in stream: {str(chunk['error'])[:200]}")
        choices = chunk.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise StreamError(f"bad choices in SSE payload: {payload[:100]!r}")
        if any(_carries_token(choice) for choice in choices):
            self.token_times.append(now)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _count(usage.get("prompt_tokens"))
            self.completion_tokens = _count(usage.get("completion_tokens"))

    def record(
        self, index: int, spec: RequestSpec, send_time: float, end_time: float, error: str | None
    ) -> RequestRecord:
        """The request's record; token counts from usage, else from the prompt and chunks."""
        times = tuple(self.token_times)
        prompt_tokens = self.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = len(spec.prompt) if isinstance(spec.prompt, list) else 0
        output_tokens = self.completion_tokens
        if output_tokens is None:
            output_tokens = len(times)
        return RequestRecord(
            index=index,
            send_time=send_time,
            first_token_time=times[0] if times else None,
            token_times=times,
            end_time=end_time,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            error=error,
        )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _carries_token(choice: dict[str, Any]) -> bool:
    """Whether a streamed choice holds a generated token.

    vLLM sends one chunk per decode step, and its text is empty while a token's bytes do not
    yet form a whole UTF-8 character (the last chunk included), so every choice counts, as in
    `vllm bench serve`, unless it lists its token ids and that list is empty.
    """
    token_ids = choice.get("token_ids")
    return bool(token_ids) if isinstance(token_ids, list) else True


class OpenAICompletionsClient:
    """A `LoadClient` for streaming `/v1/completions` (vLLM's OpenAI server and others).

    `clock` stamps send, token and end times; `transport` and `sleep` replace the network and
    the arrival waits in tests.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        clock: Clock = time.perf_counter,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        url = base_url.rstrip("/")
        self._base_url = url.removesuffix("/v1")
        self._model = model
        self._clock = clock
        self._transport = transport
        self._sleep = sleep
        self._in_flight = 0
        self._last_progress = 0.0
        self._aborted_records: list[RequestRecord] = []
        self._finished: list[RequestRecord] = []  # of the measured requests, as they end
        self._judged = False

    async def run(
        self,
        requests: Sequence[RequestSpec],
        profile: LoadProfile,
        *,
        warmup: Sequence[RequestSpec] = (),
        guard: Guard | None = None,
        before_measured: Callable[[], None] | None = None,
    ) -> list[RequestRecord]:
        http = self._open(profile.request_timeout_s)
        started = self._clock()
        try:
            self._judged = False
            if warmup:
                warm = await self._guarded(http, warmup, profile, guard, started)
                failed = sum(not record.ok for record in warm)
                if failed:
                    logger.warning("%d of %d warm-up requests failed", failed, len(warm))
            self._judged = True  # the guard's judge sees measured requests only
            if before_measured is not None:
                before_measured()
            return await self._guarded(http, requests, profile, guard, started)
        finally:
            await http.close()

    async def _guarded(
        self,
        http: LineStream,
        requests: Sequence[RequestSpec],
        profile: LoadProfile,
        guard: Guard | None,
        started: float,
    ) -> list[RequestRecord]:
        """Run `requests`; with a guard, stop them all the moment it reports an abort."""
        if guard is None:
            return await self._run_all(http, requests, profile)
        self._in_flight, self._last_progress = 0, self._clock()
        self._finished = []
        run = asyncio.ensure_future(self._run_all(http, requests, profile))
        watch = asyncio.ensure_future(self._watch(guard, started))
        await asyncio.wait((run, watch), return_when=asyncio.FIRST_COMPLETED)
        if run.done():
            watch.cancel()
            return run.result()
        abort: AbortCause = watch.result()
        run.cancel()  # every request task records itself as aborted, see `_run_all`
        with suppress(asyncio.CancelledError):
            await run
        records = self._aborted_records if run.cancelled() else run.result()
        raise BenchmarkAborted(abort, records)

    async def _watch(self, guard: Guard, started: float) -> AbortCause:
        while True:
            await asyncio.sleep(guard.interval_s)
            finished = self._finished if self._judged else ()
            now = self._clock()
            abort = guard.check(now, started, self._last_progress, self._in_flight, finished)
            if abort is not None:
                return abort

    def _open(self, request_timeout_s: float) -> LineStream:
        if self._transport is not None:
            return HttpxLines(self._base_url, request_timeout_s, self._transport)
        return AiohttpLines(self._base_url, request_timeout_s)

    async def _run_all(
        self, http: LineStream, requests: Sequence[RequestSpec], profile: LoadProfile
    ) -> list[RequestRecord]:
        gate = asyncio.Semaphore(profile.concurrency) if profile.concurrency else None

        async def one(index: int, spec: RequestSpec, offset: float) -> RequestRecord:
            try:
                if offset > 0:
                    await self._sleep(offset)
                if gate is None:
                    return await self._send(http, index, spec, profile.request_timeout_s)
                async with gate:
                    return await self._send(http, index, spec, profile.request_timeout_s)
            except asyncio.CancelledError:
                now = self._clock()
                return _Stream().record(index, spec, now, now, "aborted before it was sent")

        offsets = profile.arrival_offsets(len(requests))
        if requests and all(spec.at_s is not None for spec in requests):
            offsets = [float(spec.at_s or 0.0) for spec in requests]  # a trace's own times
        pairs = enumerate(zip(requests, offsets, strict=True))
        tasks = [asyncio.ensure_future(one(i, spec, off)) for i, (spec, off) in pairs]
        try:
            return list(await asyncio.gather(*tasks))
        except asyncio.CancelledError:
            # Aborted by the guard: each task has turned its cancellation into a record.
            await asyncio.wait(tasks)
            self._aborted_records = [task.result() for task in tasks]
            raise

    async def _send(
        self, http: LineStream, index: int, spec: RequestSpec, timeout_s: float
    ) -> RequestRecord:
        stream = _Stream()
        error: str | None = None
        send_time = self._clock()
        if not self._in_flight:
            self._last_progress = send_time  # an idle gap is not a hang
        self._in_flight += 1
        try:
            async with asyncio.timeout(timeout_s):
                await self._stream(http, spec, stream)
        except TimeoutError:
            error = f"timeout after {timeout_s:g} s"
        except (HTTPStreamError, StreamError, OSError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        except asyncio.CancelledError:
            error = "aborted while streaming"
        finally:
            self._in_flight -= 1
        end_time = self._clock()
        if error is None and not stream.token_times:
            error = "stream ended without tokens"
        elif error is None and not stream.done:
            error = "stream ended before [DONE]"
        record = stream.record(index, spec, send_time, end_time, error)
        self._finished.append(record)
        return record

    async def _stream(self, http: LineStream, spec: RequestSpec, stream: _Stream) -> None:
        """The one streaming loop: POST, then feed every SSE line, stamped on arrival."""
        body = {
            "model": self._model,
            "prompt": spec.prompt,
            "max_tokens": spec.max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
        async with http.post_lines("/v1/completions", body) as lines:
            async for line in lines:
                now = self._clock()
                self._last_progress = now
                stream.feed(line, now)
