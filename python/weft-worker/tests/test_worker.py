"""A worker against the real NATS server at WEFT_TEST_NATS_URL (skipped without it): calls made
with raw NATS requests the way weft makes them, replies, dedupe by idempotency key, args_invalid,
exceptions, two workers sharing calls, and a drain on SIGTERM. Each test uses a tenant of its
own, so tests never see each other's calls."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Optional

import pytest

from weft_worker import ToolError, Worker, subject, tool

URL = os.environ.get("WEFT_TEST_NATS_URL", "")
HERE = Path(__file__).parent

pytestmark = pytest.mark.skipif(
    not URL, reason="needs NATS: set WEFT_TEST_NATS_URL=nats://127.0.0.1:4222 (bash .ci/run does)"
)


def tenant() -> str:
    return f"t{uuid.uuid4().hex[:12]}.py"  # a dot, so subjects are escaped


def call(tool_name: str, tenant_: str, args, key: str | None = None, attempt: int = 1) -> bytes:
    key = key or uuid.uuid4().hex
    return json.dumps({
        "specversion": "1.0", "type": "weft.tool.call", "source": "weft",
        "id": f"{key}:{attempt}", "subject": tool_name, "datacontenttype": "application/json",
        "data": {"tool": tool_name, "tenant": tenant_, "instance": "i-1", "plan": "p", "step": "s",
                 "idempotency_key": key, "attempt": attempt, "deadline_ms": 0, "args": args},
    }).encode()


async def request(nc, tool_name: str, tenant_: str, args, key: str | None = None, timeout: float = 5):
    msg = await nc.request(subject(tenant_, tool_name), call(tool_name, tenant_, args, key), timeout=timeout)
    return json.loads(msg.data)


performed: list[str] = []


@tool(name="words.count")
async def count_words(text: str, weft_call: Optional[dict] = None) -> dict:
    """Counts words, slowly (so that a duplicate arrives while it runs)."""
    performed.append(weft_call["idempotency_key"])
    await asyncio.sleep(0.3)
    return {"words": len(text.split()), "n": len(performed)}


@tool
def explode(what: str) -> dict:
    """Raises."""
    if what == "quota":
        raise ToolError("quota", "over quota", retryable=True)
    raise RuntimeError(f"boom: {what}")


@tool
async def whoami(i: int, weft_call: Optional[dict] = None) -> dict:
    return {"i": i, "worker": os.environ.get("WORKER_TAG", ""), "obj": id(asyncio.get_running_loop())}


async def with_worker(tools, body, tenant_=None, workers=1):
    import nats

    t = tenant_ or tenant()
    ws = [Worker(URL, t, tools) for _ in range(workers)]
    for w in ws:
        await w.start()
    nc = await nats.connect(URL)
    try:
        return await body(nc, t, ws)
    finally:
        await nc.close()
        for w in ws:
            await w.stop()


def test_a_call_end_to_end():
    async def body(nc, t, ws):
        r = await request(nc, "words.count", t, {"text": "one two three"})
        assert r["result"]["words"] == 3
        assert list(r) == ["result"]

    asyncio.run(with_worker([count_words], body))


def test_a_repeated_key_gets_the_first_reply_and_is_performed_once():
    async def body(nc, t, ws):
        before = len(performed)
        key = uuid.uuid4().hex
        # The second request arrives while the first runs (a retry after a slow attempt).
        first, second = await asyncio.gather(
            request(nc, "words.count", t, {"text": "a b"}, key),
            request(nc, "words.count", t, {"text": "a b"}, key),
        )
        assert first == second
        third = await request(nc, "words.count", t, {"text": "a b"}, key)
        assert third == first
        assert performed[before:] == [key], "performed once for three requests"
        other = await request(nc, "words.count", t, {"text": "a b"})
        assert other["result"]["n"] == first["result"]["n"] + 1, "another key is performed"
        assert ws[0].calls == 2

    asyncio.run(with_worker([count_words], body))


def test_args_that_do_not_fit_are_args_invalid():
    async def body(nc, t, ws):
        before = len(performed)
        for args, why in [
            ({}, "missing required argument `text`"),
            ({"text": 3}, "argument `text`"),
            ({"text": "x", "lang": "en"}, "unknown argument `lang`"),
            ([1], "JSON object"),
        ]:
            r = await request(nc, "words.count", t, args)
            assert r["error"]["code"] == "args_invalid", r
            assert r["error"]["retryable"] is False
            assert why in r["error"]["message"], r
        assert len(performed) == before, "the function was not called"

    asyncio.run(with_worker([count_words], body))


def test_exceptions_become_errors():
    async def body(nc, t, ws):
        r = await request(nc, "explode", t, {"what": "the moon"})
        assert r == {"error": {"code": "tool_error", "message": "boom: the moon", "retryable": False}}
        r = await request(nc, "explode", t, {"what": "quota"})
        assert r == {"error": {"code": "quota", "message": "over quota", "retryable": True}}
        bad = await nc.request(subject(t, "explode"), b"not a cloudevent", timeout=5)
        assert json.loads(bad.data)["error"]["code"] == "bad_call"

    asyncio.run(with_worker([explode], body))


def test_two_workers_share_the_calls():
    async def body(nc, t, ws):
        rs = await asyncio.gather(*(request(nc, "whoami", t, {"i": i}) for i in range(40)))
        assert sorted(r["result"]["i"] for r in rs) == list(range(40))
        assert all(w.calls > 0 for w in ws), [w.calls for w in ws]
        assert sum(w.calls for w in ws) == 40, "each call went to one worker"

    asyncio.run(with_worker([whoami], body, workers=2))


def test_sigterm_drains_the_running_calls():
    t = tenant()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen(
        [sys.executable, "-m", "weft_worker", "serve", str(HERE / "fixtures" / "workers.py"),
         "--url", URL, "--tenant", t],
        stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        line = p.stderr.readline()
        assert "serving" in line, line

        async def main():
            import nats

            nc = await nats.connect(URL)
            pending = asyncio.ensure_future(request(nc, "slow", t, {"ms": 700}))
            await asyncio.sleep(0.3)  # the call is running
            p.send_signal(signal.SIGTERM)
            r = await pending
            assert r["result"]["slept_ms"] == 700, "the running call was answered"
            await asyncio.sleep(0.2)
            with pytest.raises(Exception) as e:  # and the worker took no new calls
                await request(nc, "slow", t, {"ms": 1}, timeout=1)
            assert "NoResponders" in type(e.value).__name__ or "no responders" in str(e.value).lower()
            await nc.close()

        asyncio.run(main())
        assert p.wait(timeout=10) == 0
    finally:
        if p.poll() is None:
            p.kill()
