"""The streaming client against scripted SSE streams with a scripted clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import pytest

from autotune.bench import (
    AbortCause,
    AbortKind,
    BenchmarkAborted,
    Guard,
    LoadProfile,
    OpenAICompletionsClient,
    RequestRecord,
    RequestSpec,
    run_benchmark,
)

DONE = b"data: [DONE]\n\n"
SPEC = RequestSpec([1, 2, 3], 3)
ONE_AT_A_TIME = LoadProfile(concurrency=1)


class FakeClock:
    """Time that only moves when the scripted stream says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ScriptedStream(httpx.AsyncByteStream):
    """Yields (delay, bytes) chunks, advancing the clock by each delay before its chunk."""

    def __init__(self, clock: FakeClock, script: list[tuple[float, bytes]], fail: bool = False):
        self.clock, self.script, self.fail = clock, script, fail

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for delay, data in self.script:
            self.clock.now += delay
            yield data
        if self.fail:
            raise httpx.RemoteProtocolError("peer closed connection")


def event(text: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    choices = [] if text is None else [{"index": 0, "text": text, "finish_reason": None}]
    body: dict[str, Any] = {"id": "cmpl-1", "object": "text_completion", "choices": choices}
    if usage:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n".encode()


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion}


def run_one(
    handler: Callable[[httpx.Request], httpx.Response],
    clock: FakeClock,
    spec: RequestSpec = SPEC,
    profile: LoadProfile = ONE_AT_A_TIME,
) -> Any:
    return run_benchmark(
        "http://engine:8000",
        "tiny",
        [],
        [spec],
        profile,
        clock=clock,
        transport=httpx.MockTransport(handler),
    )[0]


def test_timings_are_exact_and_request_is_right() -> None:
    clock = FakeClock()
    seen: list[httpx.Request] = []
    script = [
        (0.25, event("a")),
        (0.125, event("b")),
        (0.375, event("c") + event(usage=usage(7, 3)) + DONE),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, stream=ScriptedStream(clock, script))

    record = run_one(handler, clock)
    assert record.ok and record.error is None
    assert record.token_times == (0.25, 0.375, 0.75)
    assert record.ttft == 0.25
    assert record.itl == (0.125, 0.375)
    assert record.e2e == 0.75
    assert record.tpot == 0.25
    assert record.e2e - record.ttft == sum(record.itl)
    assert (record.prompt_tokens, record.output_tokens) == (7, 3)
    assert seen[0].url.path == "/v1/completions"
    assert json.loads(seen[0].content) == {
        "model": "tiny",
        "prompt": [1, 2, 3],
        "max_tokens": 3,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


def test_lines_split_across_chunks_and_no_usage() -> None:
    clock = FakeClock()
    first, second = event("a"), event("b")
    script = [
        (0.5, first[:20]),
        (0.25, first[20:] + second[:7]),  # the first token is complete only now
        (0.25, second[7:-1]),
        (0.125, b"\n" + DONE[:9]),
        (0.0, DONE[9:]),
    ]
    record = run_one(lambda _: httpx.Response(200, stream=ScriptedStream(clock, script)), clock)
    assert record.ok
    assert record.token_times == (0.75, 1.0)
    assert record.output_tokens == 2  # counted chunks, as no usage came
    assert record.prompt_tokens == 3  # length of the token-id prompt
    assert record.end_time == 1.125


@pytest.mark.parametrize(
    ("response", "needle"),
    [
        (lambda c: httpx.Response(500, text="boom"), "HTTP 500: boom"),
        (lambda c: httpx.Response(200, stream=ScriptedStream(c, [(0.1, DONE)])), "without tokens"),
        (
            lambda c: httpx.Response(200, stream=ScriptedStream(c, [(0.1, event("a"))], fail=True)),
            "RemoteProtocolError",
        ),
        (
            lambda c: httpx.Response(200, stream=ScriptedStream(c, [(0.1, event("a"))])),
            "before [DONE]",
        ),
        (
            lambda c: httpx.Response(200, content=b'data: {"error": {"message": "bad"}}\n\n'),
            "server error",
        ),
    ],
)
def test_failures_become_error_records(
    response: Callable[[FakeClock], httpx.Response], needle: str
) -> None:
    clock = FakeClock()
    record = run_one(lambda _: response(clock), clock)
    assert not record.ok
    assert needle in str(record.error)


def test_connection_error_becomes_record() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    record = run_one(handler, FakeClock())
    assert "ConnectError" in str(record.error)
    assert record.token_times == () and record.ttft is None


def test_timeout_becomes_record() -> None:
    class Stalled(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield event("a")
            await asyncio.sleep(10)

    profile = LoadProfile(concurrency=1, request_timeout_s=0.05)
    record = run_one(lambda _: httpx.Response(200, stream=Stalled()), FakeClock(), profile=profile)
    assert record.error == "timeout after 0.05 s"
    assert record.token_times == (0.0,)


def test_warmup_excluded_and_concurrency_capped() -> None:
    state = {"calls": 0, "in_flight": 0, "peak": 0}

    class Slow(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
            await asyncio.sleep(0.01)
            yield event("a") + event(usage=usage(1, 1)) + DONE
            state["in_flight"] -= 1

    def handler(request: httpx.Request) -> httpx.Response:
        state["calls"] += 1
        return httpx.Response(200, stream=Slow())

    requests = [RequestSpec("p", 1)] * 7
    records = run_benchmark(
        "http://engine:8000/v1",
        "tiny",
        [RequestSpec("w", 1)] * 2,
        requests,
        LoadProfile(concurrency=2),
        transport=httpx.MockTransport(handler),
    )
    assert [record.index for record in records] == list(range(7))
    assert all(record.ok for record in records)
    assert state["calls"] == 9
    assert state["peak"] == 2


def test_poisson_arrivals_use_injected_sleep() -> None:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=event("a") + DONE)

    profile = LoadProfile(rate=4.0, seed=9)
    client = OpenAICompletionsClient(
        "http://engine:8000", "tiny", transport=httpx.MockTransport(handler), sleep=sleep
    )
    records = asyncio.run(client.run([RequestSpec("p", 1)] * 5, profile))
    assert len(records) == 5 and all(record.ok for record in records)
    assert sorted(delays) == sorted(profile.arrival_offsets(5)[1:])


def test_empty_text_chunks_are_tokens_as_vllm_sends_them() -> None:
    """vLLM holds back partial UTF-8 bytes: such a step streams a chunk with empty text."""
    clock = FakeClock()
    last = {"index": 0, "text": "", "finish_reason": "length"}
    no_token = {"index": 0, "text": "", "token_ids": [], "finish_reason": None}
    script = [
        (0.25, event("a")),
        (0.25, event("")),
        (0.25, f"data: {json.dumps({'choices': [last]})}\n\n".encode()),
        (0.25, f"data: {json.dumps({'choices': [no_token]})}\n\n".encode()),
        (0.25, event(usage=usage(3, 3)) + DONE),
    ]
    record = run_one(lambda _: httpx.Response(200, stream=ScriptedStream(clock, script)), clock)
    assert record.token_times == (0.25, 0.5, 0.75)
    assert record.e2e == 0.75 and record.end_time == 1.25


def test_malformed_payloads_become_error_records() -> None:
    for bad in (b"data: {oops\n\n", b"data: [1]\n\n", b'data: {"choices": ["x"]}\n\n'):
        record = run_one(lambda _, bad=bad: httpx.Response(200, content=bad + DONE), FakeClock())
        assert "StreamError" in str(record.error)


class Stalling(httpx.AsyncByteStream):
    """One token, then silence (a hung engine keeps the connection open)."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield event("a")
        await asyncio.sleep(30)


def run_guarded(guard: Guard, n: int = 4, stream: type = Stalling) -> BenchmarkAborted:
    import time

    specs = [RequestSpec([1, 2, 3], 3)] * n
    started = time.monotonic()
    with pytest.raises(BenchmarkAborted) as caught:
        run_benchmark(
            "http://engine:8000",
            "tiny",
            [],
            specs,
            LoadProfile(concurrency=2),
            clock=time.monotonic,
            transport=httpx.MockTransport(lambda _: httpx.Response(200, stream=stream())),
            guard=guard,
        )
    caught.value.elapsed = time.monotonic() - started  # type: ignore[attr-defined]
    return caught.value


def test_guard_notices_a_hang_by_lack_of_tokens() -> None:
    aborted = run_guarded(Guard(hang_s=0.3, interval_s=0.05))
    assert aborted.abort.kind is AbortKind.HANG
    assert "no token streamed" in aborted.abort.reason
    assert aborted.elapsed < 2  # type: ignore[attr-defined]
    # Every request has a record: two were streaming, two never sent.
    errors = sorted(str(r.error) for r in aborted.records)
    assert errors == ["aborted before it was sent"] * 2 + ["aborted while streaming"] * 2
    assert [r.index for r in aborted.records] == [0, 1, 2, 3]


def test_guard_probe_stops_the_run_when_the_engine_dies() -> None:
    calls = {"n": 0}

    def probe() -> str | None:
        calls["n"] += 1
        return "engine exited (code -9)" if calls["n"] >= 3 else None

    aborted = run_guarded(Guard(probe=probe, interval_s=0.05))
    assert aborted.abort == AbortCause(AbortKind.ENGINE, "engine exited (code -9)")
    assert aborted.elapsed < 2  # type: ignore[attr-defined]


def test_guard_deadline_bounds_the_whole_run() -> None:
    aborted = run_guarded(Guard(deadline_s=0.3, interval_s=0.05))
    assert aborted.abort.kind is AbortKind.DEADLINE


def test_guard_lets_a_healthy_run_finish() -> None:
    clock = FakeClock()
    script = [(0.01, event("a")), (0.01, event("b", usage(3, 2))), (0.0, DONE)]
    records = run_benchmark(
        "http://engine:8000",
        "tiny",
        [SPEC],
        [SPEC, SPEC],
        ONE_AT_A_TIME,
        clock=clock,
        transport=httpx.MockTransport(
            lambda _: httpx.Response(200, stream=ScriptedStream(clock, list(script)))
        ),
        guard=Guard(probe=lambda: None, hang_s=5, deadline_s=60, interval_s=0.01),
    )
    assert [r.ok for r in records] == [True, True]


def test_idle_gaps_between_arrivals_are_not_a_hang() -> None:
    """With no request in flight, silence is the load's doing, not the engine's."""
    guard = Guard(hang_s=0.1)
    assert guard.check(now=10.0, started=0.0, last_progress=0.0, in_flight=0) is None
    assert guard.check(now=10.0, started=0.0, last_progress=0.0, in_flight=1) is not None


class SlowStream(ScriptedStream):
    """A scripted stream that also takes real time, so that the guard gets to look."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data in super().__aiter__():
            await asyncio.sleep(0.01)
            yield data


def _judged_run(judge: Callable[[Sequence[RequestRecord]], str | None]) -> list[RequestRecord]:
    clock = FakeClock()
    script = [(0.02, event("a")), (0.02, event("b", usage(3, 2))), (0.0, DONE)]
    return run_benchmark(
        "http://engine:8000",
        "tiny",
        [SPEC, SPEC],
        [SPEC] * 6,
        ONE_AT_A_TIME,
        clock=clock,
        transport=httpx.MockTransport(
            lambda _: httpx.Response(200, stream=SlowStream(clock, list(script)))
        ),
        guard=Guard(judge=judge, interval_s=0.005),
    )


def test_judge_sees_measured_requests_only_and_can_end_the_run() -> None:
    seen: list[int] = []

    def watching(finished: Sequence[RequestRecord]) -> str | None:
        seen.append(len(finished))
        return None

    assert len(_judged_run(watching)) == 6
    assert seen and max(seen) <= 6  # never the two warm-up requests

    def deciding(finished: Sequence[RequestRecord]) -> str | None:
        return "decided" if len(finished) >= 2 else None

    with pytest.raises(BenchmarkAborted) as caught:
        _judged_run(deciding)
    assert caught.value.abort == AbortCause(AbortKind.PRUNED, "decided")
    done = [r for r in caught.value.records if r.ok]
    assert 2 <= len(done) < 6


def test_stream_lines_are_whole_whatever_the_reads() -> None:
    """aiohttp hands the bytes over as they arrive: an event split over reads, several in
    one read, blank separators and a last line without a newline all come out as lines."""
    from autotune.bench._http import lines_of

    reads = [b'data: {"a"', b": 1}\n\ndata: x\n\n: ping\n", b"\n", b"data: [DO", b"NE]"]

    async def chunks() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    async def collect() -> list[str]:
        return [line async for line in lines_of(chunks())]

    assert asyncio.run(collect()) == ['data: {"a": 1}', "data: x", ": ping", "data: [DONE]"]
