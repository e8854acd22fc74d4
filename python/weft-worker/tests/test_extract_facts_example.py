"""The seed-004 ``extract_facts`` example worker (examples/extract_facts.py) without a model:
its parser on what a small model really answers (good JSON, JSON in prose, 3-item lists,
lines, garbage), and its LLM client against a local stand-in server (a reply that is not
JSON, an HTTP error, nothing listening) — never an exception other than a ToolError."""

from __future__ import annotations

import http.server
import importlib.util
import json
import socket
import threading
from pathlib import Path

import pytest

from weft_worker import ToolError

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location(
    "extract_facts_example", HERE.parent / "examples" / "extract_facts.py"
)
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)  # type: ignore[union-attr]


def test_parses_the_json_asked_for():
    facts, problem = ex.parse_facts(
        '{"facts": [{"subject": "Alice", "predicate": "lives in", "object": "Paris"}]}'
    )
    assert facts == [{"subject": "Alice", "predicate": "lives in", "object": "Paris"}]
    assert problem is None


def test_reads_json_inside_prose_and_lists_of_three():
    facts, problem = ex.parse_facts('Sure! {"facts": [["Bob", "manages", "Alice"], ["x"]]} done')
    assert facts == [{"subject": "Bob", "predicate": "manages", "object": "Alice"}]
    assert problem is None


def test_falls_back_to_lines_and_reports_garbage():
    facts, problem = ex.parse_facts("- Alice | works at | Acme Corp\nnoise")
    assert facts == [{"subject": "Alice", "predicate": "works at", "object": "Acme Corp"}]
    assert "lines" in problem
    facts, problem = ex.parse_facts("I cannot help with that.")
    assert facts == [] and "no facts" in problem


class _Stub(http.server.BaseHTTPRequestHandler):
    reply: tuple[int, bytes] = (200, b"{}")
    seen: list = []

    def do_POST(self):  # noqa: N802
        n = int(self.headers.get("content-length", 0))
        _Stub.seen.append((self.path, json.loads(self.rfile.read(n))))
        status, body = _Stub.reply
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def server(monkeypatch):
    s = http.server.HTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    monkeypatch.setenv("WEFT_LLM_BASE_URL", f"http://127.0.0.1:{s.server_port}/v1")
    _Stub.seen = []
    yield _Stub
    s.shutdown()


def test_a_good_reply_becomes_facts_with_the_models_identity(server):
    content = json.dumps({"facts": [{"subject": "a", "predicate": "b", "object": "c"}]})
    server.reply = (200, json.dumps({"id": "chatcmpl-1", "model": "m", "usage": {"completion_tokens": 9},
                                     "choices": [{"message": {"content": content}}]}).encode())
    r = ex.extract_facts("a b c.")
    assert r["facts"] == [{"subject": "a", "predicate": "b", "object": "c"}]
    assert r["llm"] == {"id": "chatcmpl-1", "model": "m", "completion_tokens": 9}
    path, body = server.seen[0]
    assert path == "/v1/chat/completions"
    assert body["messages"][1]["content"] == "a b c."


def test_bad_replies_are_results_or_tool_errors(server):
    server.reply = (200, json.dumps({"choices": [{"message": {"content": "no idea"}}]}).encode())
    r = ex.extract_facts("x")
    assert r["facts"] == [] and r["parse_error"]
    server.reply = (200, b"not json")
    with pytest.raises(ToolError) as e:
        ex.extract_facts("x")
    assert e.value.code == "llm_failed"
    server.reply = (500, b'{"error": "boom"}')
    with pytest.raises(ToolError) as e:
        ex.extract_facts("x")
    assert e.value.code == "llm_failed" and e.value.retryable


def test_an_unreachable_server_is_a_retryable_tool_error(monkeypatch):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    monkeypatch.setenv("WEFT_LLM_BASE_URL", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ToolError) as e:
        ex.extract_facts("x")
    assert e.value.code == "llm_unavailable" and e.value.retryable
