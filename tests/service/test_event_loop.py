"""The request path stays on the event loop: FastAPI runs a plain-function dependency or endpoint in its thread pool,
a hand-off (and a thread woken) per request that cost a cached /translate about half of its event-loop time; and a
request's translation runs in the request's own task, cancelled when the client goes away."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import fastapi.dependencies.utils
import fastapi.routing
import pytest
from starlette.types import Message

from tests.service.harness import EN_DE, serve
from transduce.service.routers.translate import until_disconnect

pytestmark = pytest.mark.anyio


async def test_no_route_hands_work_to_the_thread_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[str] = []

    def counting(original: Callable[..., Any]) -> Callable[..., Any]:
        async def run(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            handed.append(getattr(func, "__name__", repr(func)))
            return await original(func, *args, **kwargs)

        return run

    for module in (fastapi.dependencies.utils, fastapi.routing):
        monkeypatch.setattr(module, "run_in_threadpool", counting(module.run_in_threadpool))
    async with serve(api_keys="k1", protect_health=True) as (client, _):
        auth = {"Authorization": "Bearer k1"}
        answers = [
            await client.post("/translate", json={"q": "Hello.", **EN_DE}, headers=auth),
            await client.post("/translate", json={"q": ["A.", "B."], **EN_DE, "api_key": "k1"}),
            await client.post("/detect", json={"q": "Hello there.", "api_key": "k1"}),
            await client.get("/languages"),
            await client.get("/frontend/settings"),
            await client.get("/health", headers=auth),
            await client.get("/health/ready", headers=auth),
            await client.get("/metrics", headers=auth),
            await client.get("/latency", headers=auth),
        ]
    assert [r.status_code for r in answers] == [200] * len(answers), [r.text for r in answers]
    assert handed == []


class Hanging:
    """A request whose client hangs up when ``gone`` is set."""

    def __init__(self, gone: asyncio.Event) -> None:
        self.gone = gone

    async def receive(self) -> Message:
        await self.gone.wait()
        return {"type": "http.disconnect"}


async def test_a_translation_left_by_its_client_is_cancelled_in_the_request_task() -> None:
    started, cancelled, gone = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def work() -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "done"

    async def handler() -> int:
        try:
            await until_disconnect(Hanging(gone), work())  # type: ignore[arg-type]
        except Exception as exc:
            return int(getattr(exc, "status", 0))
        return 200

    task = asyncio.create_task(handler())
    await started.wait()
    gone.set()
    assert await asyncio.wait_for(task, 5) == 499
    assert cancelled.is_set() and not task.cancelled() and task.cancelling() == 0  # the 499 is answered normally


async def test_a_client_gone_as_the_answer_comes_cancels_nothing() -> None:
    """The watcher ends (the client hung up) in the loop pass where ``work`` returns: its callback, already queued,
    must not cancel the task that is now writing the answer."""
    over, gone = asyncio.Event(), asyncio.Event()

    async def work() -> str:
        gone.set()
        await asyncio.sleep(0)  # the watcher returns now; ``work`` on the same pass
        return "done"

    async def handler() -> tuple[str, int]:
        answer = await until_disconnect(Hanging(gone), work())  # type: ignore[arg-type]
        await asyncio.sleep(0.05)  # writing the response
        over.set()
        task = asyncio.current_task()
        return answer, task.cancelling() if task is not None else -1

    assert await asyncio.wait_for(handler(), 5) == ("done", 0)
    assert over.is_set()


async def test_a_server_cancelling_at_the_hang_up_is_not_answered_499() -> None:
    """The client hangs up and the server cancels the request (its shutdown deadline) in the same loop pass: the
    task ends cancelled, as the server asked, not with a 499 that swallows the server's cancellation."""
    started, gone = asyncio.Event(), asyncio.Event()
    handler_task: list[asyncio.Task[object]] = []

    class HangingThenCancelled(Hanging):
        async def receive(self) -> Message:
            message = await super().receive()
            asyncio.get_running_loop().call_soon(handler_task[0].cancel)  # before the watcher's callback runs
            return message

    async def work() -> str:
        started.set()
        await asyncio.sleep(30)
        return "done"

    async def handler() -> object:
        try:
            return await until_disconnect(HangingThenCancelled(gone), work())  # type: ignore[arg-type]
        except Exception as exc:
            return getattr(exc, "status", exc)

    handler_task.append(asyncio.create_task(handler()))
    await started.wait()
    gone.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(handler_task[0], 5)
    assert handler_task[0].cancelled()


async def test_a_hang_up_that_work_absorbs_leaves_the_task_uncancelled() -> None:
    """``work`` catches the watcher's cancellation and returns (as asyncio.wait_for does when its result is already
    there): the answer goes out and the task is not left marked as cancelled."""
    started, gone = asyncio.Event(), asyncio.Event()

    async def work() -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "finished anyway"
        return "done"

    async def handler() -> tuple[str, int]:
        answer = await until_disconnect(Hanging(gone), work())  # type: ignore[arg-type]
        task = asyncio.current_task()
        return answer, task.cancelling() if task is not None else -1

    task = asyncio.create_task(handler())
    await started.wait()
    gone.set()
    assert await asyncio.wait_for(task, 5) == ("finished anyway", 0)
