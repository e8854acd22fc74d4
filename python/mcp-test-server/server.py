"""The MCP test server: a real MCP peer (the official Python SDK, pinned in requirements.txt)
for weft's `mcp` tool source (crates/weft-sources/tests/mcp.rs,
crates/weft-node/tests/declared_mcp.rs).

    python server.py              # stdio
    python server.py --http PORT  # streamable HTTP at http://127.0.0.1:PORT/mcp

Tools: `add` (read-only, idempotent; plain text result), `write_note` (destructive),
`structured` (structured content), `typed` (structured content under the output schema the SDK
derives from its return type), `liar` (publishes an output schema its structured content breaks),
`fail` (raises: an `isError` result), `sleep` (waits `ms`),
`die` (the process exits mid-call, without an answer), `pid` (this process's id, to tell a
restarted server from the first one), `getenv` (a variable of its environment), `slug` (its
input schema has a pattern with a lookahead).
"""

import argparse
import os
from typing import Annotated, TypedDict

import anyio
from pydantic import WithJsonSchema
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations

server = MCPServer("weft-mcp-test")
NOTES: list[str] = []


class Facts(TypedDict):
    city: str
    population: int
    tags: list[str]


@server.tool(
    description="Add two integers",
    annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True),
    structured_output=False,
)
def add(a: int, b: int) -> int:
    return a + b


@server.tool(
    description="Store a note",
    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True),
    structured_output=False,
)
def write_note(text: str) -> str:
    NOTES.append(text)
    return f"noted {len(NOTES)}: {text}"


@server.tool(description="Facts about a city, as structured content")
def structured() -> CallToolResult:
    # Structured content with a text rendering that differs from it, so a client that
    # returns the text instead of the structured content is caught.
    facts: Facts = {"city": "Lyon", "population": 522250, "tags": ["rhone", "saone"]}
    return CallToolResult(
        content=[TextContent(type="text", text="Lyon: 522250 inhabitants")],
        structured_content=facts,
    )


@server.tool(description="Facts about a city, under a declared output schema")
def typed(city: str) -> Facts:
    return {"city": city, "population": 1, "tags": []}


@server.tool(description="Facts that break the output schema the tool publishes")
def liar() -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text="a city")],
        structured_content={"city": 7},
    )


# An output schema published by hand is advertised but not checked by the SDK, so this server
# lies about its output the way a faulty one would.
server._tool_manager.get_tool("liar").fn_metadata.output_schema = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


@server.tool(description="Always fails")
def fail() -> str:
    # A deliberate ToolError reaches the client as an isError result with its text (any other
    # exception is masked as "Error executing tool fail").
    raise ToolError("the fail tool failed on purpose")


@server.tool(description="Wait ms milliseconds", structured_output=False)
async def sleep(ms: int) -> int:
    await anyio.sleep(ms / 1000)
    return ms


@server.tool(description="Exit the server process in the middle of the call")
def die() -> str:
    os._exit(3)


@server.tool(description="This server process's id", structured_output=False)
def pid() -> int:
    return os.getpid()


@server.tool(description="An environment variable of this process ('' when unset)", structured_output=False)
def getenv(name: str) -> str:
    return os.environ.get(name, "")


@server.tool(description="Echo a slug", structured_output=False)
def slug(
    # Published with a lookahead, which weft's linear-time patterns do not take: the tool is
    # kept and its args go unchecked on weft's side (this server does not check them either).
    name: Annotated[str, WithJsonSchema({"type": "string", "pattern": "^(?!-)[a-z-]+$"})],
) -> str:
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args()
    if args.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
