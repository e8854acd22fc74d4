"""Declaring tools to a running weft (``register``): the PUT each tool becomes, the token, and
weft's refusals as ``RegistrationError`` with weft's code and hint. Against a real HTTP server
(``http.server``) standing in for weft's ``/v1/tools`` routes; the Rust test
``crates/weft-server/tests/worker_register.rs`` does the same against weft itself."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from weft_worker import RegistrationError, register, tool


@tool(effect="write", idempotent=False, timeout_ms=2_000, retry=1)
def notify(channel: str, text: str = "") -> dict:
    """Post a notification."""
    return {"ok": True}


@tool
def refused(x: int) -> int:
    """weft refuses this one."""
    return x


class Recorder(BaseHTTPRequestHandler):
    calls: list = []

    def do_PUT(self):  # noqa: N802 — http.server's name
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        Recorder.calls.append((self.path, self.headers.get("authorization"), body))
        if body["name"] == "refused":
            problem = {"code": "tool_exists", "detail": "`refused` is one of the node's own tools",
                       "hint": "choose another name"}
            self.send_response(409)
            payload = json.dumps(problem).encode()
        else:
            self.send_response(201)
            payload = json.dumps({"name": body["name"], "version": 1, "source": "api"}).encode()
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def weft():
    Recorder.calls = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_each_tool_is_put_with_its_worker_declaration_and_the_token(weft):
    out = register(weft, [notify], token="tok-a")
    assert out == [{"name": "notify", "version": 1, "source": "api"}]
    [(path, auth, body)] = Recorder.calls
    assert path == "/v1/tools/notify"
    assert auth == "Bearer tok-a"
    assert body["source"] == {"kind": "worker"}
    assert (body["effect"], body["idempotent"], body["timeout_ms"], body["retry"]) == ("write", False, 2000, {"max": 1})
    assert body["input_schema"]["required"] == ["channel"]
    assert body["description"] == "Post a notification."


def test_a_refusal_carries_wefts_code_and_hint(weft):
    with pytest.raises(RegistrationError) as e:
        register(weft, [notify, refused])
    assert (e.value.tool, e.value.status, e.value.code) == ("refused", 409, "tool_exists")
    assert e.value.hint == "choose another name"
    assert [c[0] for c in Recorder.calls] == ["/v1/tools/notify", "/v1/tools/refused"]


def test_an_unreachable_weft_is_a_clear_error():
    with pytest.raises(RegistrationError) as e:
        register("http://127.0.0.1:9", [notify], timeout=2)
    assert e.value.code == "unreachable"
    assert "weft serve" in e.value.hint
