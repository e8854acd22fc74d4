"""A typed client for weft's HTTP API (``weft serve``): plans, instances, CloudEvents, approvals
and the lifecycle event stream.

It lives beside the worker library in the same distribution (``pip install python/weft-worker``)
so an agent written in Python installs one package to both serve tools and drive plans; it
imports nothing from the worker side and needs no NATS. It uses the standard library only
(``urllib.request`` for requests, ``http.client``'s streamed response for Server-Sent Events):
no HTTP dependency to pin or to clash with an application's own.

Every response is a dataclass (the fields the server documents in ``/openapi.json``, plus
``raw``: the whole JSON, so fields added later are not lost). Every error answer
(``application/problem+json``) is raised as :class:`WeftError` with its ``status``, ``code``,
``detail`` and ``hint``; a network failure is a :class:`WeftError` with status 0 and code
``unreachable``.

>>> from weft_worker.client import Client
>>> weft = Client("http://127.0.0.1:8080", token=None)
>>> weft.register_plan(open("examples/sample.json").read())      # doctest: +SKIP
>>> run = weft.start("sample", input={})                          # doctest: +SKIP
>>> for ev in weft.stream(instance=run.id):                       # doctest: +SKIP
...     print(ev.type, ev.data)
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "Accepted",
    "Client",
    "CloudEvent",
    "EventStream",
    "InstanceList",
    "InstanceRef",
    "InstanceState",
    "InstanceSummary",
    "PlanCreated",
    "PlanDetail",
    "PlanSummary",
    "StreamEvent",
    "Validation",
    "WeftError",
]

#: Where ``weft serve`` listens by default.
DEFAULT_URL = "http://127.0.0.1:8080"

Json = dict[str, Any]


class WeftError(Exception):
    """An error answer of weft (its problem+json document), or a failure to reach it.

    ``status`` is the HTTP status (0 when weft could not be reached), ``code`` weft's stable
    snake_case code (``not_found``, ``invalid_plan``, …), ``detail`` what went wrong in this
    request, ``hint`` how to fix it (may be ``None``), ``findings`` the plan's findings when
    the problem is about a plan.
    """

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        hint: str | None = None,
        *,
        title: str = "",
        request_id: str = "",
        findings: list[Json] | None = None,
    ) -> None:
        super().__init__(f"[{code}] {detail}" + (f" (hint: {hint})" if hint else ""))
        self.status = status
        self.code = code
        self.detail = detail
        self.hint = hint
        self.title = title
        self.request_id = request_id
        self.findings = findings

    @classmethod
    def from_problem(cls, status: int, body: bytes) -> WeftError:
        """The error of an answer with status ``status`` and body ``body``."""
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or "code" not in doc:
            text = body.decode("utf-8", "replace").strip()[:500]
            return cls(status, "http_error", f"HTTP {status}: {text or 'no body'}")
        return cls(
            int(doc.get("status", status)),
            str(doc["code"]),
            str(doc.get("detail", "")),
            doc.get("hint"),
            title=str(doc.get("title", "")),
            request_id=str(doc.get("request_id", "")),
            findings=doc.get("findings"),
        )


def _fields(cls: type, doc: Json) -> Json:
    names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
    return {k: v for k, v in doc.items() if k in names}


@dataclasses.dataclass(frozen=True)
class PlanCreated:
    """A plan stored by :meth:`Client.register_plan` (a new version of its name)."""

    name: str
    version: int
    status: str
    findings: list[Json]
    analysis: Json | None
    raw: Json = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class PlanSummary:
    """One plan of :meth:`Client.list_plans`: its latest version."""

    name: str
    version: int
    status: str
    created_at_ms: int
    steps: int
    verdict: str
    raw: Json = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class PlanDetail:
    """A stored plan version with its findings and analysis summary."""

    name: str
    version: int
    status: str
    plan: Json
    findings: list[Json]
    analysis: Json | None
    raw: Json = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Validation:
    """The answer of :meth:`Client.validate_plan`: ``ok`` when no finding is an error."""

    ok: bool
    findings: list[Json]
    raw: Json = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class InstanceRef:
    """A started or stopped instance."""

    id: str
    status: str
    plan: str | None = None
    version: int | None = None
    raw: Json = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class InstanceSummary:
    """One instance of :meth:`Client.list_instances`."""

    id: str
    plan: str
    version: int
    status: str
    created_at_ms: int
    updated_at_ms: int
    raw: Json = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class InstanceList:
    """A page of instances; ``next`` is the cursor of the next page (``None``: the last)."""

    instances: list[InstanceSummary]
    next: str | None
    raw: Json = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class InstanceState:
    """An instance now: status, marking, waiting steps, actions in flight, results."""

    id: str
    plan: str
    version: int
    status: str
    reason: str | None
    journal_head: int
    marking: Json
    waiting: list[Json]
    in_flight: list[Json]
    results: list[Json]
    failure: Json | None
    fired: int
    live: bool
    raw: Json = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Accepted:
    """``202`` of :meth:`Client.send_event`: events accepted, deliveries to instances, and
    events ignored because the same ``source`` and ``id`` were applied before."""

    accepted: int
    routed: int
    duplicates: int
    raw: Json = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class CloudEvent:
    """An event to send (structured mode, CloudEvents 1.0). ``instance`` routes it to one
    instance (the ``weftinstance`` extension); without it weft routes it by ``type`` to every
    instance of the tenant waiting for an event of that name. ``id`` defaults to a fresh UUID;
    weft applies an event with a ``source`` and ``id`` it has seen before only once."""

    type: str
    data: Any = None
    instance: str | None = None
    source: str = "weft-python"
    id: str = dataclasses.field(default_factory=lambda: str(uuid.uuid4()))
    extensions: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> Json:
        """The structured-mode JSON document."""
        doc: Json = {
            "specversion": "1.0",
            "id": self.id,
            "source": self.source,
            "type": self.type,
            **dict(self.extensions),
        }
        if self.data is not None:
            doc["datacontenttype"] = "application/json"
            doc["data"] = self.data
        if self.instance is not None:
            doc["weftinstance"] = self.instance
        return doc


@dataclasses.dataclass(frozen=True)
class StreamEvent:
    """One event of :meth:`Client.stream`. ``type`` is the CloudEvent type
    (``dev.weft.plan.started``, ``dev.weft.plan.step.finished``, …) and ``data`` the CloudEvent JSON (its ``data`` field holds the
    event's own data). ``type == "weft.lagged"`` (no ``id``) says events were lost for this
    stream: ``data["missed"]`` counts them, ``None`` when weft no longer keeps the events after
    the ``Last-Event-ID`` it was given."""

    id: str | None
    type: str
    data: Json

    @property
    def instance(self) -> str | None:
        """The instance the event is about (``weftinstance``)."""
        v = self.data.get("weftinstance")
        return v if isinstance(v, str) else None


class EventStream(Iterator[StreamEvent]):
    """The lifecycle events of :meth:`Client.stream`, as an iterator that reconnects.

    When the connection drops (or is silent for ``read_timeout`` seconds: weft sends
    keep-alives meanwhile), it reconnects with ``Last-Event-ID`` set to the last ``id`` it
    received, so weft first sends what was missed (weft keeps each tenant's last 4,096 events
    or 8 MiB, in one server process). After ``max_reconnects`` failed attempts in a row it
    raises :class:`WeftError`; an error answer (a bad token, an unknown instance) is raised at
    once. Close it (or use it as a context manager) to end the stream.
    """

    def __init__(
        self,
        client: Client,
        query: Mapping[str, str],
        last_event_id: str | None,
        read_timeout: float,
        max_reconnects: int,
    ) -> None:
        self._client = client
        self._path = "/v1/events/stream" + (
            "?" + urllib.parse.urlencode(query) if query else ""
        )
        #: The id of the last event received: where a reconnection resumes.
        self.last_event_id = last_event_id
        self._read_timeout = read_timeout
        self._max_reconnects = max_reconnects
        self._retry_s = 0.5
        self._conn: http.client.HTTPConnection | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._closed = False

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Ends the stream."""
        self._closed = True
        self.drop_connection()

    def drop_connection(self) -> None:
        """Closes the current connection; the next read reconnects with ``Last-Event-ID``."""
        conn, self._conn, self._resp = self._conn, None, None
        if conn is not None:
            conn.close()

    def _connect(self) -> http.client.HTTPResponse:
        url = urllib.parse.urlsplit(self._client.url)
        cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        conn = cls(url.hostname or "127.0.0.1", url.port, timeout=self._read_timeout)
        headers = {"Accept": "text/event-stream", **self._client._headers()}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        try:
            conn.request("GET", url.path.rstrip("/") + self._path, headers=headers)
            resp = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        if resp.status != 200:
            body = resp.read()
            conn.close()
            raise WeftError.from_problem(resp.status, body)
        self._conn, self._resp = conn, resp
        return resp

    def _frame(self, resp: http.client.HTTPResponse) -> StreamEvent | None:
        """Reads one frame; ``None`` for a frame without an event (a keep-alive comment)."""
        ev_id: str | None = None
        ev_type = ""
        data: list[str] = []
        while True:
            line = resp.readline()
            if not line:
                raise ConnectionError("the stream ended")
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if text == "":
                break
            if text.startswith(":"):
                continue
            field, _, value = text.partition(":")
            value = value.removeprefix(" ")
            if field == "id":
                ev_id = value
            elif field == "event":
                ev_type = value
            elif field == "data":
                data.append(value)
            elif field == "retry" and value.isdigit():
                self._retry_s = int(value) / 1000
        if not ev_type and not data:
            return None
        try:
            doc = json.loads("\n".join(data)) if data else {}
        except ValueError:
            doc = {"text": "\n".join(data)}
        if not isinstance(doc, dict):
            doc = {"value": doc}
        return StreamEvent(id=ev_id, type=ev_type or "message", data=doc)

    def __next__(self) -> StreamEvent:
        failures = 0
        while not self._closed:
            try:
                resp = self._resp or self._connect()
                failures = 0
                event = self._frame(resp)
            except WeftError as e:
                if e.code != "unreachable" and e.status != 503:
                    self.close()
                    raise
                error: Exception = e
            except (OSError, http.client.HTTPException, ConnectionError) as e:
                error = e
            else:
                if event is None:
                    continue
                if event.id is not None:
                    self.last_event_id = event.id
                return event
            self.drop_connection()
            if self._closed:
                break
            failures += 1
            if failures > self._max_reconnects:
                self.close()
                raise WeftError(
                    0,
                    "unreachable",
                    f"the event stream of {self._client.url} dropped and {self._max_reconnects} "
                    f"reconnections failed: {error}",
                    "check that weft serve is running at that address",
                )
            time.sleep(min(self._retry_s * failures, 5.0))
        raise StopIteration


class Client:
    """weft's HTTP API. ``url`` is where ``weft serve`` listens; ``token`` (default
    ``WEFT_TOKEN``) is sent as a bearer token and selects the tenant; ``timeout`` bounds each
    request in seconds."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        self.url = (url or os.environ.get("WEFT_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("WEFT_TOKEN") or None
        self.timeout = timeout

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        content_type: str = "application/json",
        query: Mapping[str, Any] | None = None,
    ) -> Any:
        if query:
            q = {k: str(v) for k, v in query.items() if v is not None}
            if q:
                path += "?" + urllib.parse.urlencode(q)
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        for k, v in self._headers().items():
            req.add_header(k, v)
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as e:
            raise WeftError.from_problem(e.code, e.read()) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            raise WeftError(
                0,
                "unreachable",
                f"{method} {self.url}{path}: {reason}",
                "check that weft serve is running at that address (WEFT_URL)",
            ) from None
        return json.loads(payload) if payload else None

    # --- plans ------------------------------------------------------------------------------

    @staticmethod
    def _plan_bytes(plan: Mapping[str, Any] | str | bytes) -> bytes:
        if isinstance(plan, bytes):
            return plan
        if isinstance(plan, str):
            return plan.encode()
        return json.dumps(plan).encode()

    def register_plan(self, plan: Mapping[str, Any] | str | bytes) -> PlanCreated:
        """Validates, analyses and stores ``plan`` (a dict or its JSON text) as the next
        version of its name. A plan with errors raises :class:`WeftError` (``findings`` set)."""
        doc = self._request("POST", "/v1/plans", raw=self._plan_bytes(plan))
        return PlanCreated(raw=doc, **_fields(PlanCreated, doc))

    def list_plans(self) -> list[PlanSummary]:
        """The tenant's plans, the latest version of each."""
        doc = self._request("GET", "/v1/plans")
        return [PlanSummary(raw=p, **_fields(PlanSummary, p)) for p in doc["plans"]]

    def get_plan(self, name: str, version: int | None = None) -> PlanDetail:
        """A stored plan: its latest version, or ``version``."""
        path = f"/v1/plans/{_seg(name)}"
        if version is not None:
            path += f"/versions/{int(version)}"
        doc = self._request("GET", path)
        return PlanDetail(raw=doc, **_fields(PlanDetail, doc))

    def validate_plan(self, plan: Mapping[str, Any] | str | bytes) -> Validation:
        """Checks ``plan`` without storing it: findings for any JSON, ``ok`` when none is an
        error."""
        doc = self._request("POST", "/v1/validate", raw=self._plan_bytes(plan))
        return Validation(raw=doc, **_fields(Validation, doc))

    # --- instances --------------------------------------------------------------------------

    def start(
        self,
        plan: str,
        input: Mapping[str, Any] | None = None,
        *,
        version: int | None = None,
    ) -> InstanceRef:
        """Starts an instance of the stored plan ``plan`` (latest version unless ``version``)
        with ``input``; returns once its start is durable."""
        body: Json = {"plan": plan, "input": dict(input or {})}
        if version is not None:
            body["version"] = version
        doc = self._request("POST", "/v1/instances", body)
        return InstanceRef(raw=doc, **_fields(InstanceRef, doc))

    def get_instance(self, instance: str) -> InstanceState:
        """An instance's state now."""
        doc = self._request("GET", f"/v1/instances/{_seg(instance)}")
        return InstanceState(raw=doc, **_fields(InstanceState, doc))

    def list_instances(
        self,
        *,
        status: str | None = None,
        plan: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> InstanceList:
        """A page of the tenant's instances, newest first; pass ``cursor=page.next`` for the
        next page."""
        doc = self._request(
            "GET",
            "/v1/instances",
            query={"status": status, "plan": plan, "limit": limit, "cursor": cursor},
        )
        items = [InstanceSummary(raw=i, **_fields(InstanceSummary, i)) for i in doc["instances"]]
        return InstanceList(instances=items, next=doc.get("next"), raw=doc)

    def stop(self, instance: str) -> InstanceRef:
        """Stops a running or waiting instance."""
        doc = self._request("POST", f"/v1/instances/{_seg(instance)}/stop")
        return InstanceRef(raw=doc, **_fields(InstanceRef, doc))

    def approve(
        self,
        instance: str,
        step: str,
        *,
        approved: bool = True,
        comment: str | None = None,
        principal: str | None = None,
        firing: int | None = None,
    ) -> Json:
        """Grants (or, with ``approved=False``, denies) the pending approval of ``step`` of
        ``instance`` (``POST /v1/instances/{id}/approvals/{step}``) and returns the decided
        approval. Nothing waiting is ``404`` ``no_approval``; a decided one ``409``
        ``already_decided``, raised as :class:`WeftError`."""
        body: Json = {"decision": "grant" if approved else "deny"}
        if comment is not None:
            body["comment"] = comment
        if principal is not None:
            body["principal"] = principal
        if firing is not None:
            body["firing"] = firing
        path = f"/v1/instances/{_seg(instance)}/approvals/{_seg(step)}"
        return self._request("POST", path, body) or {}

    def approvals(self, instance: str) -> list[Json]:
        """The approvals of ``instance``'s firings in flight (``GET
        /v1/instances/{id}/approvals``), oldest first."""
        path = f"/v1/instances/{_seg(instance)}/approvals"
        return (self._request("GET", path) or {}).get("approvals", [])

    def transcripts(self, instance: str) -> Json:
        """The language-model exchanges ``instance``'s steps made (``GET
        /v1/instances/{id}/transcripts``): ``{"exchanges": [...], "usage": {"prompt_tokens",
        "completion_tokens"}}``, oldest first."""
        path = f"/v1/instances/{_seg(instance)}/transcripts"
        return self._request("GET", path) or {"exchanges": [], "usage": {}}

    # --- events -----------------------------------------------------------------------------

    def send_event(
        self,
        event: CloudEvent | str,
        data: Any = None,
        *,
        instance: str | None = None,
    ) -> Accepted:
        """Sends one CloudEvent: a :class:`CloudEvent`, or its ``type`` with ``data`` and
        ``instance``. Returns once the receiving instances' records are durable."""
        if isinstance(event, str):
            event = CloudEvent(type=event, data=data, instance=instance)
        doc = self._request(
            "POST",
            "/v1/events",
            event.to_json(),
            content_type="application/cloudevents+json",
        )
        return Accepted(raw=doc, **_fields(Accepted, doc))

    def send_events(self, events: Iterable[CloudEvent]) -> Accepted:
        """Sends a batch: all are applied, or none (an error names the bad one)."""
        doc = self._request(
            "POST",
            "/v1/events",
            [e.to_json() for e in events],
            content_type="application/cloudevents-batch+json",
        )
        return Accepted(raw=doc, **_fields(Accepted, doc))

    def stream(
        self,
        *,
        instance: str | None = None,
        types: Iterable[str] | None = None,
        last_event_id: str | None = None,
        read_timeout: float = 60.0,
        max_reconnects: int = 5,
    ) -> EventStream:
        """The tenant's lifecycle events as they happen (Server-Sent Events), optionally of
        one ``instance`` and of some ``types`` (``plan.step.*`` matches a prefix; a short
        name such as ``plan.completed`` also matches ``dev.weft.plan.completed``). Start
        after ``last_event_id`` to get what came after it first. The stream is connected when this
        returns, so every event from then on is delivered; an error answer (a bad token, an
        unknown instance) is raised here. See :class:`EventStream`."""
        query: dict[str, str] = {}
        if types:
            query["type"] = ",".join(types)
        if instance is not None:
            query["instance"] = instance
        stream = EventStream(self, query, last_event_id, read_timeout, max_reconnects)
        try:
            stream._connect()
        except (OSError, http.client.HTTPException):
            pass  # unreachable for now: the first read retries, as after a drop
        return stream


def _seg(s: str) -> str:
    """A path segment, escaped."""
    return urllib.parse.quote(s, safe="")
