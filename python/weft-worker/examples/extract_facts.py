"""Seed 004's ``extract_facts`` "Cortex verb" as a weft worker tool: it asks an
OpenAI-compatible LLM server for the subject/predicate/object facts of a text and returns them.

    python -m weft_worker describe examples/extract_facts.py >> weft.toml   # declare it
    WEFT_LLM_BASE_URL=http://127.0.0.1:8081/v1 python examples/extract_facts.py

Environment: ``WEFT_LLM_BASE_URL`` (required, e.g. ``http://127.0.0.1:8081/v1``),
``WEFT_LLM_MODEL`` (default ``default``), ``WEFT_LLM_API_KEY`` (optional bearer key),
``WEFT_LLM_TIMEOUT_S`` (default 60); ``NATS_URL`` and ``WEFT_TENANT`` when run as a script.
Plain ``urllib``: no dependency beyond the worker library.

A small model's output is often not the JSON asked for: the reply is parsed as well as it can
be (the JSON object anywhere in the text, facts as objects or as 3-item lists, a line-based
``subject | predicate | object`` fallback), and what could not be parsed is reported in the
result (``parse_error``, the raw ``llm_output``) rather than raised. Only an unreachable or
failing LLM server is an error (``llm_unavailable``, retryable; ``llm_failed``), never a
crash of the worker.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from typing import Any

from weft_worker import ToolError, Worker, tool

SYSTEM = (
    "You extract facts from text. Reply with JSON only, of the form "
    '{"facts": [{"subject": "...", "predicate": "...", "object": "..."}]}: '
    "one entry per fact stated in the text, short phrases, nothing else."
)

#: The reply's shape, sent as ``response_format`` (servers that support it, like llama.cpp's,
#: constrain the output to it; others ignore it and the parser below copes).
FACTS_SCHEMA = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "maxItems": 12,
            "items": {
                "type": "object",
                "properties": {
                    "subject": {"type": "string", "maxLength": 80},
                    "predicate": {"type": "string", "maxLength": 80},
                    "object": {"type": "string", "maxLength": 80},
                },
                "required": ["subject", "predicate", "object"],
            },
        }
    },
    "required": ["facts"],
}

MAX_TEXT = 8000


def _chat(text: str) -> dict:
    """One chat completion from the configured server; raises ToolError on failure."""
    base = os.environ.get("WEFT_LLM_BASE_URL", "").rstrip("/")
    if not base:
        raise ToolError("llm_unavailable", "WEFT_LLM_BASE_URL is not set", retryable=False)
    body = {
        "model": os.environ.get("WEFT_LLM_MODEL", "default"),
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": text[:MAX_TEXT]},
        ],
        "temperature": 0,
        "max_tokens": 256,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "facts", "schema": FACTS_SCHEMA},
        },
    }
    headers = {"Content-Type": "application/json"}
    key = os.environ.get("WEFT_LLM_API_KEY")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(
        f"{base}/chat/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    timeout = float(os.environ.get("WEFT_LLM_TIMEOUT_S", "60"))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read(4 << 20)
    except urllib.error.HTTPError as e:
        excerpt = e.read(500).decode("utf-8", "replace")
        raise ToolError(
            "llm_failed", f"the LLM server answered {e.code}: {excerpt}", retryable=e.code >= 500
        ) from None
    except (urllib.error.URLError, OSError) as e:
        raise ToolError("llm_unavailable", f"cannot reach {base}: {e}", retryable=True) from None
    try:
        reply = json.loads(raw)
    except ValueError:
        raise ToolError("llm_failed", "the LLM server's reply is not JSON", retryable=False) from None
    if not isinstance(reply, dict):
        raise ToolError("llm_failed", "the LLM server's reply is not an object", retryable=False)
    return reply


def _content(reply: dict) -> str:
    try:
        c = reply["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    return c if isinstance(c, str) else ""


def _fact(v: Any) -> dict | None:
    """One fact from an object with the three fields, or a list of three strings."""
    if isinstance(v, dict):
        parts = [v.get("subject"), v.get("predicate"), v.get("object")]
    elif isinstance(v, (list, tuple)) and len(v) == 3:
        parts = list(v)
    else:
        return None
    parts = [p.strip() if isinstance(p, str) else p for p in parts]
    if not all(isinstance(p, str) and p for p in parts):
        return None
    return {"subject": parts[0], "predicate": parts[1], "object": parts[2]}


def parse_facts(text: str) -> tuple[list[dict], str | None]:
    """The facts in a model's reply, best effort, and what went wrong (None: nothing)."""
    candidates: list[Any] = []
    t = text.strip()
    try:
        candidates.append(json.loads(t))
    except ValueError:
        a, b = t.find("{"), t.rfind("}")
        if a != -1 and a < b:
            try:
                candidates.append(json.loads(t[a : b + 1]))
            except ValueError:
                pass
    for c in candidates:
        items = c.get("facts") if isinstance(c, dict) else c if isinstance(c, list) else None
        if isinstance(items, list):
            facts = [f for f in map(_fact, items) if f]
            if facts or not items:
                return facts, None if facts else "the model found no facts"
    # Lines like `Alice | lives in | Paris` or `(Alice, lives in, Paris)`.
    facts = []
    for line in t.splitlines():
        parts = [p.strip(" -*()[]\"'") for p in re.split(r"\s*[|,;]\s*", line.strip()) if p.strip()]
        f = _fact(parts) if len(parts) == 3 else None
        if f:
            facts.append(f)
    if facts:
        return facts, "the reply was not the JSON asked for; facts were read from its lines"
    return [], "the reply holds no facts in a form that could be read"


@tool(effect="read", idempotent=True, timeout_ms=60000)
def extract_facts(text: str) -> dict:
    """Extract structured subject/predicate/object facts from a span of text.

    Args:
        text: the text to read
    """
    reply = _chat(text)
    output = _content(reply)
    facts, problem = parse_facts(output)
    usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
    result = {
        "facts": facts,
        "llm_output": output[:2000],
        "llm": {
            "id": reply.get("id"),
            "model": reply.get("model"),
            "completion_tokens": usage.get("completion_tokens"),
        },
    }
    if problem:
        result["parse_error"] = problem
    return result


if __name__ == "__main__":
    Worker(
        os.environ.get("NATS_URL", "nats://127.0.0.1:4222"),
        tenant=os.environ.get("WEFT_TENANT", "local"),
    ).serve()
