"""The typed HTTP client (``weft_worker.client``) against a real ``weft serve``: plans,
instances, CloudEvents (single and batch), the event stream and its reconnection with
``Last-Event-ID``, and weft's problem documents as ``WeftError``.

The server is the ``weft`` binary at ``WEFT_BIN`` (``.ci/run`` builds it and sets it), started
per module on a free port over a temporary store. Without ``WEFT_BIN`` every test here is
skipped with that reason, and ``.ci/run`` fails on skipped tests.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from weft_worker.client import Client, CloudEvent, EventStream, StreamEvent, WeftError

ROOT = pathlib.Path(__file__).resolve().parents[3]
TOKEN = "client-test-token"

REACTIVE = {
    "plan_name": "client-reactive",
    "graph_type": "reactive",
    "events": {"ping": {"kind": "input"}, "seen": {"kind": "output"}},
    "steps": {
        "see": {"on": ["ping"], "action": "echo", "args": {"n": "${ping.n}"}, "emits": ["seen"]}
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = os.environ.get("WEFT_BIN", "")
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip(
            "needs a built weft: WEFT_BIN is not set to an executable "
            "(cargo build -p weft-cli --bin weft; export WEFT_BIN=$CARGO_TARGET_DIR/debug/weft)"
        )
    work = tmp_path_factory.mktemp("weft-serve")
    log = open(work / "server.log", "wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_LLM_")}
    env.update(WEFT_API_TOKENS=f"{TOKEN}=client-tests", RUST_LOG="error", NO_COLOR="1")
    proc = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--store", str(work / "weft.db")],
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = None
        for _ in range(300):
            m = re.search(rb"http://127\.0\.0\.1:\d+", (work / "server.log").read_bytes())
            if m:
                url = m.group(0).decode()
                break
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        if url is None:
            pytest.fail("weft serve did not start: " + (work / "server.log").read_text())
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture
def weft(server: str) -> Client:
    return Client(server, token=TOKEN, timeout=30)


def sample() -> dict:
    return json.loads((ROOT / "examples" / "sample.json").read_text())


def wait_status(weft: Client, instance: str, want: str) -> str:
    status = ""
    for _ in range(200):
        status = weft.get_instance(instance).status
        if status == want:
            return status
        time.sleep(0.05)
    return status


def until_finished(stream: EventStream, n: int) -> list[StreamEvent]:
    out: list[StreamEvent] = []
    seen = 0
    while seen < n:
        ev = next(stream)
        out.append(ev)
        seen += ev.type == "dev.weft.plan.step.finished"
    return out


def test_plans_register_list_get_validate(weft: Client) -> None:
    created = weft.register_plan(sample())
    assert (created.name, created.status) == ("sample", "template")
    assert created.version >= 1
    # The same document again is the same version; a changed one is the next.
    same = weft.register_plan(json.dumps(sample()))
    assert same.version == created.version
    again = weft.register_plan(dict(sample(), description="version two"))
    assert again.version == created.version + 1
    names = {p.name: p for p in weft.list_plans()}
    assert names["sample"].version == again.version and names["sample"].steps == 1
    detail = weft.get_plan("sample", version=created.version)
    assert detail.version == created.version and detail.plan["plan_name"] == "sample"
    assert weft.get_plan("sample").version == again.version
    assert weft.validate_plan(sample()).ok
    bad = dict(sample(), steps={"first": dict(sample()["steps"]["first"], action="nope")})
    checked = weft.validate_plan(bad)
    assert not checked.ok and checked.findings


def test_a_plan_with_errors_raises_with_its_findings(weft: Client) -> None:
    bad = dict(sample(), steps={"first": dict(sample()["steps"]["first"], action="nope")})
    with pytest.raises(WeftError) as e:
        weft.register_plan(bad)
    assert e.value.status == 422 and e.value.code
    assert e.value.findings and any("nope" in json.dumps(f) for f in e.value.findings)


def test_instances_start_get_list(weft: Client) -> None:
    weft.register_plan(sample())
    run = weft.start("sample", input={})
    assert run.id and run.plan == "sample"
    assert wait_status(weft, run.id, "completed") == "completed"
    state = weft.get_instance(run.id)
    assert state.results and state.fired == 1
    page = weft.list_instances(plan="sample", limit=50)
    assert run.id in {i.id for i in page.instances}
    assert all(i.plan == "sample" for i in page.instances)


def test_events_single_and_batch_then_stop(weft: Client) -> None:
    weft.register_plan(REACTIVE)
    run = weft.start("client-reactive")
    got = weft.send_event("ping", {"n": 1}, instance=run.id)
    assert (got.accepted, got.routed, got.duplicates) == (1, 1, 0)
    batch = [CloudEvent("ping", {"n": k}, instance=run.id) for k in (2, 3)]
    got = weft.send_events(batch)
    assert (got.accepted, got.routed) == (2, 2)
    # The same source and id again: applied once.
    assert weft.send_events(batch).duplicates == 2
    for _ in range(200):
        if weft.get_instance(run.id).fired == 3:
            break
        time.sleep(0.05)
    assert weft.get_instance(run.id).fired == 3
    stopped = weft.stop(run.id)
    assert stopped.id == run.id
    assert wait_status(weft, run.id, stopped.status) == stopped.status
    with pytest.raises(WeftError) as e:
        weft.send_events([CloudEvent("ping", {"n": 4}, instance="nope-404")])
    assert e.value.status in (404, 422) and e.value.code


def test_problems_are_raised_with_code_detail_hint_and_status(weft: Client, server: str) -> None:
    with pytest.raises(WeftError) as e:
        weft.get_instance("no-such-instance")
    assert (e.value.status, e.value.code) == (404, "not_found")
    assert "no-such-instance" in e.value.detail
    with pytest.raises(WeftError) as e:
        Client(server, token="wrong").list_plans()
    assert e.value.status == 401 and e.value.code and e.value.hint
    with pytest.raises(WeftError) as e:
        Client("http://127.0.0.1:9", token=TOKEN, timeout=5).list_plans()
    assert (e.value.status, e.value.code) == (0, "unreachable")


def test_approve_grants_a_waiting_step_and_refuses_when_nothing_waits(weft: Client) -> None:
    weft.register_plan(REACTIVE)
    run = weft.start("client-reactive")
    assert weft.approvals(run.id) == []
    # No model calls: an empty transcript (and an unknown instance is 404).
    assert weft.transcripts(run.id)["exchanges"] == []
    with pytest.raises(WeftError) as e:
        weft.transcripts("nope")
    assert e.value.status == 404
    with pytest.raises(WeftError) as e:
        weft.approve(run.id, "see")
    assert e.value.status == 404 and e.value.code == "no_approval"
    weft.register_plan(
        {"plan_name": "client-approval", "graph_type": "acyclic",
         "events": {"start": {}, "done": {"kind": "output"}},
         "steps": {"ship": {"on": ["start"], "action": "echo", "args": {},
                            "approval": {"reason": "ship it?"}, "emits": ["done"]}}}
    )
    run = weft.start("client-approval")
    for _ in range(200):
        waiting = weft.approvals(run.id)
        if waiting:
            break
        time.sleep(0.02)
    assert waiting[0]["step"] == "ship" and waiting[0]["reasons"] == ["ship it?"]
    decided = weft.approve(run.id, "ship", comment="ok", principal="ann")
    assert decided["decision"]["granted"] is True
    assert decided["decision"]["principal"] == "ann"
    with pytest.raises(WeftError) as e:
        weft.approve(run.id, "ship", approved=False)
    assert e.value.status in (404, 409)


def test_stream_reconnects_with_last_event_id_and_misses_nothing(weft: Client) -> None:
    weft.register_plan(REACTIVE)
    run = weft.start("client-reactive")
    with weft.stream(instance=run.id) as control, weft.stream(instance=run.id) as stream:
        # Both are connected when stream() returns.
        weft.send_event("ping", {"n": 1}, instance=run.id)
        first = until_finished(stream, 1)
        all_events = until_finished(control, 1)
        assert [e.id for e in first] == [e.id for e in all_events]
        assert stream.last_event_id == first[-1].id
        # The connection drops; meanwhile two events happen; the next read reconnects.
        stream.drop_connection()
        weft.send_event("ping", {"n": 2}, instance=run.id)
        weft.send_event("ping", {"n": 3}, instance=run.id)
        all_events += until_finished(control, 2)
        resumed = [next(stream) for _ in range(len(all_events) - len(first))]
        assert [e.id for e in resumed] == [e.id for e in all_events[len(first) :]]
        assert all(e.instance == run.id for e in resumed)
        assert sum(e.type == "dev.weft.plan.step.finished" for e in resumed) == 2


def test_a_stream_started_after_an_id_gets_what_followed_it(weft: Client) -> None:
    weft.register_plan(REACTIVE)
    run = weft.start("client-reactive")
    with weft.stream(instance=run.id, types=["plan.step.*"]) as stream:
        weft.send_event("ping", {"n": 1}, instance=run.id)
        last = until_finished(stream, 1)[-1].id
    weft.send_event("ping", {"n": 2}, instance=run.id)
    with weft.stream(instance=run.id, types=["plan.step.*"], last_event_id=last) as later:
        got = until_finished(later, 1)
    assert [e.type for e in got] == ["dev.weft.plan.step.started", "dev.weft.plan.step.finished"]
    with weft.stream(instance=run.id, last_event_id="unknown-id") as unknown:
        first = next(unknown)
    assert (first.type, first.id, first.data) == ("weft.lagged", None, {"missed": None})


def test_a_stream_of_an_unknown_instance_raises(weft: Client) -> None:
    with pytest.raises(WeftError) as e:
        weft.stream(instance="no-such-instance")
    assert (e.value.status, e.value.code) == (404, "not_found")


def test_metrics_parse_as_prometheus_text_and_as_openmetrics(weft: Client, server: str) -> None:
    """``/metrics`` in the format ``Accept`` asks for, read by the official Prometheus
    client's parsers: the text format 0.0.4 by default, OpenMetrics 1.0 when asked."""
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )
    from prometheus_client.parser import text_string_to_metric_families as prometheus_families

    weft.register_plan(sample())
    weft.start("sample")

    def scrape(accept: str | None) -> tuple[str, str]:
        req = urllib.request.Request(server + "/metrics")
        if accept:
            req.add_header("Accept", accept)
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.headers["Content-Type"], r.read().decode()

    ct, text = scrape(None)
    assert ct == "text/plain; version=0.0.4; charset=utf-8"
    families = {f.name: f for f in prometheus_families(text)}
    assert families["weft_instances_started"].type == "counter"
    assert families["weft_instances_started"].samples[0].value >= 1
    assert families["weft_action_latency_seconds"].type == "histogram"

    ct, text = scrape("application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
    assert ct.startswith("application/openmetrics-text; version=1.0.0")
    families = {f.name: f for f in openmetrics_families(text)}
    assert families["weft_instances_started"].type == "counter"
    assert families["weft_instances_started"].samples[0].value >= 1
