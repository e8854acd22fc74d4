"""Input schemas from type hints, the cheap args check, subject tokens (the same as weft's,
crates/weft-sources/src/worker.rs) and the printed declaration: no NATS needed."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, TypedDict

import pytest

from weft_worker import describe, input_schema, subject, subject_token, tool

HERE = Path(__file__).parent


class Span(TypedDict):
    start: int
    end: int


class Loose(TypedDict, total=False):
    label: str


@dataclasses.dataclass
class Doc:
    text: str
    lang: str = "en"
    tags: list[str] = dataclasses.field(default_factory=list)


class Opaque:
    pass


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_scalars_lists_dicts_optionals_and_defaults():
    def f(
        s: str,
        i: int,
        x: float,
        b: bool,
        xs: list[int],
        m: dict[str, float],
        anything: dict,
        maybe: Optional[str] = None,
        either: int | str = 1,
        raw: Any = None,
        n: int = 3,
    ) -> None: ...

    s = input_schema(f)
    p = s["properties"]
    assert p["s"] == {"type": "string"}
    assert p["i"] == {"type": "integer"}
    assert p["x"] == {"type": "number"}
    assert p["b"] == {"type": "boolean"}
    assert p["xs"] == {"type": "array", "items": {"type": "integer"}}
    assert p["m"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert p["anything"] == {"type": "object"}
    assert p["maybe"] == {"type": ["string", "null"]}
    assert p["either"] == {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 1}
    assert p["raw"] == {}
    assert p["n"] == {"type": "integer", "default": 3}
    assert s["required"] == ["s", "i", "x", "b", "xs", "m", "anything"]
    assert s["additionalProperties"] is False


def test_typeddicts_dataclasses_enums_literals_and_annotations():
    def f(
        span: Span,
        loose: Loose,
        doc: Doc,
        colour: Colour,
        mode: Literal["fast", "slow"],
        note: Annotated[str, "a short note"],
        **extra: Any,
    ) -> None: ...

    s = input_schema(f)
    p = s["properties"]
    assert p["span"] == {
        "type": "object",
        "title": "Span",
        "properties": {"start": {"type": "integer"}, "end": {"type": "integer"}},
        "required": ["start", "end"],
    }
    assert "required" not in p["loose"]
    assert p["doc"]["required"] == ["text"]
    assert p["doc"]["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert p["colour"] == {"enum": ["red", "blue"]}
    assert p["mode"] == {"enum": ["fast", "slow"], "type": "string"}
    assert p["note"] == {"type": "string", "description": "a short note"}
    assert "additionalProperties" not in s, "**extra accepts other args"


def test_descriptions_come_from_the_docstring():
    @tool(effect="write", idempotent=False)
    def send(to: str, body: str = "") -> dict:
        """Send a message to someone.

        More detail that is not the description.

        Args:
            to: the recipient's address
            body (str): the text,
                on two lines
        """
        return {}

    t = send.__weft_tool__
    assert t.name == "send"
    assert t.description == "Send a message to someone."
    assert t.input_schema["properties"]["to"]["description"] == "the recipient's address"
    assert t.input_schema["properties"]["body"]["description"] == "the text, on two lines"
    assert (t.effect, t.idempotent) == ("write", False)
    assert send(to="x") == {}, "the function stays callable"


def test_context_parameters_are_not_args():
    def f(text: str, idempotency_key: str = "", weft_call: Optional[dict] = None): ...

    assert list(input_schema(f)["properties"]) == ["text"]


def test_unsupported_hints_and_bad_effects_are_refused():
    def f(o: Opaque): ...

    with pytest.raises(TypeError, match="parameter o"):
        input_schema(f)
    with pytest.raises(ValueError, match="effect"):
        tool(effect="delete")(lambda: None)


def test_the_args_check_looks_at_top_level_types():
    @tool
    def f(text: str, n: int = 1, ratio: float = 0.5, maybe: Optional[int] = None, span: Span | None = None):
        return None

    t = f.__weft_tool__
    assert t.check({"text": "a"}) is None
    assert t.check({"text": "a", "n": 2, "ratio": 1, "maybe": None, "span": {"start": 1}}) is None
    assert "missing required argument `text`" in t.check({"n": 1})
    assert "`n`" in t.check({"text": "a", "n": "2"})
    assert "`n`" in t.check({"text": "a", "n": True}), "a boolean is not an integer"
    assert "`maybe`" in t.check({"text": "a", "maybe": "x"})
    assert "`span`" in t.check({"text": "a", "span": [1, 2]})
    assert "unknown argument `colour`" in t.check({"text": "a", "colour": "red"})
    assert "JSON object" in t.check(["a"])


def test_subject_tokens_escape_like_weft():
    # The same vectors as crates/weft-sources/src/worker.rs `names_are_one_token_each`.
    assert subject_token("extract_facts") == "extract_facts"
    assert subject_token("a.b") == "a%2Eb"
    assert subject_token("*") == "%2A"
    assert subject_token(">") == "%3E"
    assert subject_token("a b") == "a%20b"
    assert subject_token("50%") == "50%25"
    assert subject_token("") == "%"
    assert subject_token("é") == "%C3%A9"
    assert subject("acme.eu", "facts.extract") == "weft.tool.acme%2Eeu.facts%2Eextract"


def test_describe_prints_toml_weft_reads():
    out = subprocess.run(
        [sys.executable, "-m", "weft_worker", "describe", str(HERE / "fixtures" / "workers.py"),
         "--url", "nats://10.0.0.1:4222"],
        check=True, capture_output=True, text=True,
    ).stdout
    doc = tomllib.loads(out)
    tools = {t["name"]: t for t in doc["tools"]["declared"]}
    assert list(tools) == ["echo", "facts.extract", "hang_once", "fail", "slow", "bench_echo"]
    echo = tools["echo"]
    assert echo["source"] == {"kind": "worker", "url": "nats://10.0.0.1:4222"}
    assert echo["effect"] == "read" and echo["idempotent"] is True
    assert echo["description"] == "Repeats a text."
    assert echo["input_schema"]["required"] == ["text"]
    assert tools["hang_once"]["effect"] == "write"


def test_describe_round_trips_awkward_strings():
    @tool(name="odd", description='quotes " and \\ and\nnewlines, ünïcode', timeout_ms=5000, retry=2)
    def odd(x: Annotated[str, 'a "quoted" hint']): ...

    doc = tomllib.loads(describe([odd.__weft_tool__]))
    t = doc["tools"]["declared"][0]
    assert t["description"] == 'quotes " and \\ and\nnewlines, ünïcode'
    assert t["input_schema"]["properties"]["x"]["description"] == 'a "quoted" hint'
    assert t["timeout_ms"] == 5000 and t["retry"] == {"max": 2}


def test_the_example_driver_is_about_ten_lines():
    src = (HERE.parent / "examples" / "driver.py").read_text()
    code = [l for l in src.splitlines() if l.strip()]
    assert len(code) <= 14, len(code)
    out = subprocess.run(
        [sys.executable, "-m", "weft_worker", "describe", str(HERE.parent / "examples" / "driver.py")],
        check=True, capture_output=True, text=True,
    ).stdout
    t = tomllib.loads(out)["tools"]["declared"][0]
    assert t["name"] == "post_teams" and t["effect"] == "write"
    assert t["input_schema"]["required"] == ["channel", "text"]
