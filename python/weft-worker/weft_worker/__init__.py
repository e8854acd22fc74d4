"""weft-worker: serve Python functions as weft tools over NATS.

A function marked with :func:`tool` becomes a tool whose input JSON Schema comes from its type
hints and whose description comes from its docstring. :class:`Worker` serves tools: each on
the subject ``weft.tool.<tenant>.<name>`` in the queue group ``weft.<name>`` (so several
workers share the calls), answering weft's requests (a CloudEvent ``weft.tool.call``) with
``{"result": ...}`` or ``{"error": {"code", "message", "retryable"}}``.

``python -m weft_worker describe MODULE`` prints the ``[[tools.declared]]`` entries to paste
into ``weft.toml``; ``python -m weft_worker serve MODULE`` serves the module's tools and, given
``--register URL``, declares them to that running weft (``PUT /v1/tools/{name}``: the tenant's
own tools, see :func:`register`).

Duplicates: weft retries a call that got no reply (a worker died, or was too slow) with the same
idempotency key. A worker remembers the reply of every key it has seen (the last
``dedupe_max``, within its process lifetime) and answers a repeated key with the first call's
reply, waiting for it if that call is still running, so a retry reaching the same worker does not
perform the call twice. A retry reaching another worker does: tools with side effects should
also use ``idempotency_key`` themselves (declare a parameter of that name to receive it).
"""

from __future__ import annotations

import asyncio
import collections
import collections.abc
import dataclasses
import enum
import inspect
import json
import re
import signal
import sys
import types
import typing
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable

__all__ = [
    "DEFAULT_URL",
    "Tool",
    "ToolError",
    "RegistrationError",
    "Worker",
    "describe",
    "register",
    "input_schema",
    "registered",
    "subject",
    "subject_token",
    "tool",
    "tools_of",
]

#: The NATS server used when none is given (weft's default for worker tools too).
DEFAULT_URL = "nats://127.0.0.1:4222"

#: Parameters filled from the call, not from its args (declare them to receive them).
CONTEXT_PARAMS = ("idempotency_key", "weft_call")

_EFFECTS = ("pure", "read", "write")
_PLAIN = re.compile(r"[A-Za-z0-9_-]+")


def subject_token(s: str) -> str:
    """``s`` as one NATS subject token, exactly as weft computes it.

    Letters, digits, ``_`` and ``-`` stay; every other byte of the UTF-8 encoding becomes
    ``%XX`` (upper-case hex); the empty string becomes ``%``. So a tenant or tool name with
    ``.``, ``*`` or ``>`` can neither add a token nor be a wildcard, and distinct names give
    distinct tokens.
    """
    if s == "":
        return "%"
    if _PLAIN.fullmatch(s):
        return s
    out = []
    for b in s.encode("utf-8"):
        c = chr(b)
        out.append(c if (c.isascii() and (c.isalnum() or c in "_-")) else f"%{b:02X}")
    return "".join(out)


def subject(tenant: str, name: str) -> str:
    """The subject of ``name``'s calls for ``tenant``: ``weft.tool.<tenant>.<name>``."""
    return f"weft.tool.{subject_token(tenant)}.{subject_token(name)}"


class ToolError(Exception):
    """Raise it from a tool to reply an error with a code of your own (and, when retrying
    may help, ``retryable=True``). Any other exception replies ``tool_error``, not
    retryable."""

    def __init__(self, code: str, message: str, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


# --- JSON Schema from type hints ---------------------------------------------------------------


def _schema(tp: Any, seen: tuple = ()) -> dict:
    """The JSON Schema of values of type ``tp`` (raises TypeError when there is none)."""
    if tp is inspect.Parameter.empty or tp is Any or tp is object:
        return {}
    if tp is None or tp is type(None):
        return {"type": "null"}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        s = dict(_schema(args[0], seen))
        desc = next((a for a in args[1:] if isinstance(a, str)), None)
        if desc:
            s["description"] = desc
        return s
    if origin is typing.Union or origin is types.UnionType:
        subs = [_schema(a, seen) for a in args if a is not type(None)]
        if len(subs) < len(args):  # Optional
            if len(subs) == 1 and list(subs[0]) == ["type"] and isinstance(subs[0]["type"], str):
                return {"type": [subs[0]["type"], "null"]}
            subs.append({"type": "null"})
        return subs[0] if len(subs) == 1 else {"anyOf": subs}
    if origin is typing.Literal:
        s: dict = {"enum": list(args)}
        kinds = {_json_type(a) for a in args}
        if len(kinds) == 1:
            s["type"] = kinds.pop()
        return s
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if tp in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset):
        s = {"type": "array"}
        items = [a for a in args if a is not Ellipsis]
        if len(items) == 1 or (origin is tuple and len(set(items)) == 1 and items):
            s["items"] = _schema(items[0], seen)
        return s
    if tp is dict or origin is dict or (
        origin is not None and origin is collections.abc.Mapping
    ):
        s = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            s["additionalProperties"] = _schema(args[1], seen)
        return s
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if typing.is_typeddict(tp) or dataclasses.is_dataclass(tp):
        if tp in seen:
            raise TypeError(f"{tp.__name__} refers to itself; recursive types have no schema here")
        seen = seen + (tp,)
        hints = _hints(tp)
        if typing.is_typeddict(tp):
            names = list(hints)
            required = [n for n in names if n in tp.__required_keys__]
        else:
            fields = [f for f in dataclasses.fields(tp) if f.init]
            names = [f.name for f in fields]
            required = [
                f.name
                for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ]
        s = {
            "type": "object",
            "title": tp.__name__,
            "properties": {n: _schema(hints.get(n, Any), seen) for n in names},
        }
        if required:
            s["required"] = required
        return s
    raise TypeError(
        f"no JSON Schema for type {tp!r}: use str, int, float, bool, None, list[...], dict[...], "
        "Optional/Union, Literal, an Enum, a TypedDict, a dataclass or Any"
    )


def _json_type(v: Any) -> str:
    """The JSON Schema type name of a JSON value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _docs(fn: Callable) -> tuple[str, dict[str, str]]:
    """The description (the docstring's first paragraph) and the parameter descriptions
    of an ``Args:`` section (Google style), if any."""
    doc = inspect.getdoc(fn) or ""
    paras = doc.split("\n\n")
    head = " ".join(line.strip() for line in paras[0].splitlines()).strip() if doc else ""
    params: dict[str, str] = {}
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.strip() in ("Args:", "Arguments:", "Parameters:"):
            cur = None
            for l2 in lines[i + 1 :]:
                if not l2.strip():
                    break
                m = re.match(r"^\s+(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", l2)
                if m and (len(l2) - len(l2.lstrip())) <= 4:
                    cur = m.group(1)
                    params[cur] = m.group(3).strip()
                elif cur:
                    params[cur] = (params[cur] + " " + l2.strip()).strip()
            break
    return head, params


def _hints(obj: Any) -> dict:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except NameError as e:
        raise TypeError(
            f"cannot resolve the type hints of {getattr(obj, '__qualname__', obj)!r}: {e} "
            "(define the types at module level)"
        ) from None


def input_schema(fn: Callable) -> dict:
    """The JSON Schema of ``fn``'s args: an object with one property per parameter (from its
    type hint; any value without one), ``required`` = the parameters without defaults."""
    sig = inspect.signature(fn)
    hints = _hints(fn)
    _, pdocs = _docs(fn)
    props: dict[str, dict] = {}
    required: list[str] = []
    extra = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            extra = True
            continue
        if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            raise TypeError(f"tool {fn.__name__}: *args and positional-only parameters cannot be args")
        if p.name in CONTEXT_PARAMS:
            continue
        try:
            s = dict(_schema(hints.get(p.name, inspect.Parameter.empty)))
        except TypeError as e:
            raise TypeError(f"tool {fn.__name__}, parameter {p.name}: {e}") from None
        if p.name in pdocs and "description" not in s:
            s["description"] = pdocs[p.name]
        if p.default is p.empty:
            required.append(p.name)
        elif _jsonable(p.default):
            s["default"] = p.default
        props[p.name] = s
    schema: dict = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if not extra:
        schema["additionalProperties"] = False
    return schema


def _jsonable(v: Any) -> bool:
    if v is None:
        return False  # TOML has no null: leave such defaults out of the schema
    if isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_jsonable(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _jsonable(x) for k, x in v.items())
    return False


# --- tools -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Tool:
    """A function served as a weft tool, and its declaration."""

    fn: Callable
    name: str
    description: str
    effect: str
    idempotent: bool
    input_schema: dict
    timeout_ms: int | None = None
    retry: int | None = None
    #: Parameter name -> the dataclass to build from its JSON object.
    _build: dict = dataclasses.field(default_factory=dict, repr=False)
    _context: tuple = dataclasses.field(default=(), repr=False)

    def check(self, args: Any) -> str | None:
        """Why ``args`` do not fit the schema (top-level fields only), or None."""
        if not isinstance(args, dict):
            return f"args must be a JSON object, got {_json_type(args)}"
        props = self.input_schema.get("properties", {})
        for r in self.input_schema.get("required", []):
            if r not in args:
                return f"missing required argument `{r}`"
        for k, v in args.items():
            s = props.get(k)
            if s is None:
                if self.input_schema.get("additionalProperties") is False:
                    return f"unknown argument `{k}` (expected: {', '.join(props) or 'none'})"
                continue
            if not _fits(s, v):
                return f"argument `{k}` must match {json.dumps(s, sort_keys=True)}, got {_json_type(v)}"
        return None


def _fits(s: dict, v: Any) -> bool:
    """Whether ``v`` fits schema ``s`` by its top-level type (and ``enum``)."""
    if "anyOf" in s:
        return any(_fits(x, v) for x in s["anyOf"])
    if "enum" in s and v not in s["enum"]:
        return False
    t = s.get("type")
    if t is None:
        return True
    kinds = [t] if isinstance(t, str) else list(t)
    jt = _json_type(v)
    if jt in kinds:
        return True
    if jt == "integer" and "number" in kinds:
        return True
    if jt == "number" and "integer" in kinds and isinstance(v, float) and v.is_integer():
        return True
    return False


_REGISTRY: list[Tool] = []


def tool(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    effect: str = "read",
    idempotent: bool = True,
    description: str | None = None,
    timeout_ms: int | None = None,
    retry: int | None = None,
):
    """Marks a function (sync or async) as a tool; use as ``@tool`` or ``@tool(...)``.

    ``name`` defaults to the function's name and ``description`` to its docstring's first
    paragraph; the input schema comes from the type hints (see :func:`input_schema`).
    ``timeout_ms`` and ``retry`` (further attempts) go into the printed declaration. The
    function is returned unchanged (its :class:`Tool` is ``fn.__weft_tool__``). Sync
    functions run in a thread, so they may block.
    """

    def mark(f: Callable) -> Callable:
        if effect not in _EFFECTS:
            raise ValueError(f"effect must be one of {_EFFECTS}, got {effect!r}")
        head, _ = _docs(f)
        hints = _hints(f)
        params = inspect.signature(f).parameters
        build = {}
        for p in params:
            h = hints.get(p)
            if typing.get_origin(h) is typing.Annotated:
                h = typing.get_args(h)[0]
            if isinstance(h, type) and dataclasses.is_dataclass(h):
                build[p] = h
        t = Tool(
            fn=f,
            name=name or f.__name__,
            description=description if description is not None else head,
            effect=effect,
            idempotent=idempotent,
            input_schema=input_schema(f),
            timeout_ms=timeout_ms,
            retry=retry,
            _build=build,
            _context=tuple(p for p in CONTEXT_PARAMS if p in params),
        )
        f.__weft_tool__ = t
        _REGISTRY.append(t)
        return f

    return mark(fn) if fn is not None else mark


def registered() -> list[Tool]:
    """Every tool marked in this process, in the order marked."""
    return list(_REGISTRY)


def tools_of(module: types.ModuleType) -> list[Tool]:
    """The tools defined in ``module``, in definition order."""
    return [
        v.__weft_tool__
        for v in vars(module).values()
        if callable(v) and isinstance(getattr(v, "__weft_tool__", None), Tool)
    ]


# --- the declaration (TOML) --------------------------------------------------------------------


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)} = {_toml(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {v!r}")


def _key(k: str) -> str:
    return k if _PLAIN.fullmatch(k) else json.dumps(k, ensure_ascii=False)


def describe(tools: list[Tool], url: str = DEFAULT_URL) -> str:
    """The ``[[tools.declared]]`` entries of ``tools`` (TOML) for ``weft.toml``."""
    out = []
    for t in tools:
        lines = [
            "[[tools.declared]]",
            f"name = {_toml(t.name)}",
            f"description = {_toml(t.description)}",
            f"effect = {_toml(t.effect)}",
            f"idempotent = {_toml(t.idempotent)}",
        ]
        if t.timeout_ms is not None:
            lines.append(f"timeout_ms = {int(t.timeout_ms)}")
        if t.retry is not None:
            lines.append(f"retry = {{ max = {int(t.retry)} }}")
        lines.append(f"input_schema = {_toml(t.input_schema)}")
        lines.append(f"source = {_toml({'kind': 'worker', 'url': url})}")
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


# --- registering with a running weft ------------------------------------------------------------


def definition(t: Tool) -> dict:
    """``t``'s declaration as the JSON body of ``PUT /v1/tools/{name}`` (a ``worker`` tool on
    the weft node's own NATS server and its tenant's subject)."""
    d: dict = {
        "name": t.name,
        "description": t.description,
        "input_schema": t.input_schema,
        "effect": t.effect,
        "idempotent": t.idempotent,
        "source": {"kind": "worker"},
    }
    if t.timeout_ms is not None:
        d["timeout_ms"] = int(t.timeout_ms)
    if t.retry is not None:
        d["retry"] = {"max": int(t.retry)}
    return d


class RegistrationError(Exception):
    """weft refused a tool declaration: ``code`` and ``hint`` are weft's (``host_not_allowed``,
    ``tool_exists``, ``invalid_tool``, ``unauthorized``, …; ``unreachable`` when weft could not
    be reached)."""

    def __init__(self, tool: str, status: int, code: str, detail: str, hint: str = ""):
        super().__init__(f"weft refused tool `{tool}`: [{code}] {detail}" + (f" ({hint})" if hint else ""))
        self.tool, self.status, self.code, self.detail, self.hint = tool, status, code, detail, hint


def register(weft_url: str, tools: list, token: str | None = None, timeout: float = 10.0) -> list[dict]:
    """Declares ``tools`` to the weft at ``weft_url`` as the token's tenant's own tools
    (``PUT /v1/tools/{name}``; an unchanged declaration keeps its version). Returns weft's
    description of each; raises :class:`RegistrationError` on the first refusal. Blocking."""
    out = []
    base = weft_url.rstrip("/")
    for t in [getattr(x, "__weft_tool__", x) for x in tools]:
        body = json.dumps(definition(t)).encode()
        req = urllib.request.Request(
            f"{base}/v1/tools/{urllib.parse.quote(t.name, safe='')}",
            data=body,
            method="PUT",
            headers={"content-type": "application/json"},
        )
        if token:
            req.add_header("authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                out.append(json.loads(r.read() or b"null"))
        except urllib.error.HTTPError as e:
            try:
                p = json.loads(e.read() or b"{}")
            except ValueError:
                p = {}
            raise RegistrationError(
                t.name, e.code, p.get("code", f"http_{e.code}"), p.get("detail", str(e)), p.get("hint", "")
            ) from None
        except (urllib.error.URLError, OSError) as e:
            raise RegistrationError(
                t.name, 0, "unreachable", f"cannot reach weft at {base}: {e}", "is `weft serve` running there?"
            ) from None
    return out


# --- serving -----------------------------------------------------------------------------------


def _error(code: str, message: str, retryable: bool = False) -> bytes:
    return json.dumps(
        {"error": {"code": code, "message": message, "retryable": retryable}}
    ).encode()


class Worker:
    """Serves tools over NATS for one tenant.

    ``tools`` defaults to every tool marked in the process. With ``register`` (a weft URL, and
    ``token`` when weft has API tokens), ``start()`` declares the tools to that weft once they
    are served; ``tenant`` must then be the token's tenant (weft calls ``weft.tool.<tenant>.…``). ``serve()`` blocks until SIGTERM
    or SIGINT, then drains: it stops taking calls, lets the running ones finish (up to
    ``drain_timeout`` seconds) and replies to them. ``start()``/``stop()`` do the same
    inside a running event loop.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        tenant: str = "local",
        tools: list | None = None,
        *,
        dedupe_max: int = 100_000,
        drain_timeout: float = 30.0,
        name: str | None = None,
        register: str | None = None,
        token: str | None = None,
    ):
        self.url = url
        self.tenant = tenant
        #: A running weft to declare the tools to once they are served (see :func:`register`).
        self.register_url = register
        self.token = token
        ts = registered() if tools is None else [getattr(t, "__weft_tool__", t) for t in tools]
        for t in ts:
            if not isinstance(t, Tool):
                raise TypeError(f"{t!r} is not a tool: mark it with @tool")
        names = [t.name for t in ts]
        if len(set(names)) != len(names):
            raise ValueError(f"two tools have the same name: {names}")
        self.tools = ts
        self.dedupe_max = dedupe_max
        self.drain_timeout = drain_timeout
        self.name = name or f"weft-worker/{tenant}"
        self._nc = None
        self._subs: list = []
        self._inflight: set[asyncio.Task] = set()
        self._replies: collections.OrderedDict = collections.OrderedDict()
        self.calls = 0  # calls performed (not answered from memory)

    async def start(self) -> None:
        """Connects and subscribes every tool; returns once the server has the subscriptions."""
        import nats  # imported here so that schemas and `describe` need no NATS package

        self._nc = await nats.connect(
            servers=[self.url], name=self.name, max_reconnect_attempts=-1
        )
        for t in self.tools:
            sub = await self._nc.subscribe(
                subject(self.tenant, t.name),
                queue=f"weft.{subject_token(t.name)}",
                cb=self._callback(t),
            )
            self._subs.append(sub)
        await self._nc.flush()
        if self.register_url:
            # Declared only once served, so weft's first call finds a worker.
            await asyncio.to_thread(register, self.register_url, self.tools, self.token)

    def _callback(self, t: Tool):
        async def on_message(msg) -> None:
            task = asyncio.get_running_loop().create_task(self._answer(t, msg))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

        return on_message

    async def _answer(self, t: Tool, msg) -> None:
        reply = await self._reply(t, msg.data)
        if msg.reply:
            await msg.respond(reply)

    async def _reply(self, t: Tool, raw: bytes) -> bytes:
        try:
            event = json.loads(raw)
            data = event["data"]
            args = data.get("args", {})
            key = data.get("idempotency_key")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return _error("bad_call", f"not a weft.tool.call CloudEvent: {e}")
        if not key:
            return await self._perform(t, data, args)
        seen = (data.get("tenant"), t.name, key)
        fut = self._replies.get(seen)
        if fut is not None:
            self._replies.move_to_end(seen)
            return await asyncio.shield(fut)
        fut = asyncio.get_running_loop().create_future()
        self._replies[seen] = fut
        while len(self._replies) > self.dedupe_max:
            self._replies.popitem(last=False)
        try:
            reply = await self._perform(t, data, args)
        except BaseException as e:  # cancelled (shutting down): later duplicates get an error
            fut.set_result(_error("worker_stopped", f"the worker stopped: {e!r}", True))
            raise
        fut.set_result(reply)
        return reply

    async def _perform(self, t: Tool, data: dict, args: Any) -> bytes:
        why = t.check(args)
        if why is not None:
            return _error("args_invalid", f"tool `{t.name}`: {why}")
        kwargs = dict(args)
        try:
            for p, cls in t._build.items():
                if isinstance(kwargs.get(p), dict):
                    kwargs[p] = cls(**kwargs[p])
        except TypeError as e:
            return _error("args_invalid", f"tool `{t.name}`: {e}")
        if "idempotency_key" in t._context:
            kwargs["idempotency_key"] = data.get("idempotency_key")
        if "weft_call" in t._context:
            kwargs["weft_call"] = {k: v for k, v in data.items() if k != "args"}
        self.calls += 1
        try:
            if inspect.iscoroutinefunction(t.fn):
                result = await t.fn(**kwargs)
            else:
                result = await asyncio.to_thread(t.fn, **kwargs)
        except ToolError as e:
            return _error(e.code, e.message, e.retryable)
        except Exception as e:  # noqa: BLE001 — every failure becomes a reply
            return _error("tool_error", str(e) or type(e).__name__)
        if dataclasses.is_dataclass(result) and not isinstance(result, type):
            result = dataclasses.asdict(result)
        try:
            return json.dumps({"result": result}, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:
            return _error("result_invalid", f"tool `{t.name}` returned no JSON value: {e}")

    async def stop(self) -> None:
        """Drains: no new calls, the running ones finish and are answered, then disconnects."""
        if self._nc is None:
            return
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 — already closed
                pass
        self._subs = []
        if self._inflight:
            await asyncio.wait(list(self._inflight), timeout=self.drain_timeout)
        try:
            await self._nc.drain()
        except Exception:  # noqa: BLE001 — already closed
            pass
        self._nc = None

    async def serve_async(self) -> None:
        """Serves until SIGTERM or SIGINT, then drains."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(s, stop.set)
        await self.start()
        print(
            f"weft-worker: serving {', '.join(t.name for t in self.tools)} for tenant "
            f"{self.tenant!r} on {self.url}",
            file=sys.stderr,
            flush=True,
        )
        await stop.wait()
        await self.stop()

    def serve(self) -> None:
        """Serves until SIGTERM or SIGINT (blocking), then drains."""
        asyncio.run(self.serve_async())
