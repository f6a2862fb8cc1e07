"""MCP conformance of Warden, driven by the official Python SDK (`pip install mcp`), for
Warden's end-to-end conformance tests (tests/mcp_conformance.rs).

    mcp_conformance.py stdio|http MARKER COMMAND...

Connects to Warden — over stdio by running COMMAND (`warden mcp ...`), or over
Streamable HTTP at COMMAND[0] with the bearer token in $WARDEN_TOKEN — and checks, in
order, printing `ok NAME` for each check that passed (and exiting non-zero on the first
that did not):

  initialize with every protocol version the SDK offers (and the stateless
  server/discover era), ping; list the tools and validate every schema with a JSON Schema
  (2020-12) validator; call every tool — allowed, denied, asked with no approver, invalid
  arguments — and validate every structured result against its tool's output schema;
  progress notifications of a long run; cancelling a running exec (its process is gone).

Then it starts `sleep MARKER`, prints `holding`, and waits to be killed: the test kills
it mid-call and checks that the run went with it. The workspace must hold `notes.txt`;
the home must let host=gateway run anything (the denials come from tool parameters).
"""

import base64
import os
import sys
import time
from contextlib import asynccontextmanager

import anyio
import httpx2
from jsonschema import Draft202012Validator
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from mcp_cancel import sleeps

TOOLS = ["exec", "process", "read", "write", "edit", "list", "grep", "session"]

# A call of every tool that succeeds in the test's workspace.
VALID = [
    ("read", {"path": "notes.txt", "offset": 1, "limit": 2}),
    ("write", {"path": "out/new.txt", "content": "one two\n"}),
    ("edit", {"path": "out/new.txt", "old_string": "two", "new_string": "three"}),
    ("list", {}),
    ("grep", {"pattern": "alpha"}),
    ("session", {"command": "/exec"}),
    ("process", {"action": "list"}),
]

# Arguments every tool refuses, and the field the refusal must name.
INVALID = [
    ("exec", {"command": "true", "timeout": -5}, "timeout"),
    ("exec", {"command": ""}, "command"),
    ("exec", {}, "command"),
    ("exec", {"command": "true", "argv": ["true"]}, "command"),
    ("exec", {"argv": []}, "argv"),
    ("exec", {"command": "true", "host": "moon"}, "host"),
    ("exec", {"command": "true", "env": {"A": 1}}, "env.A"),
    ("read", {"path": "notes.txt", "offset": 0}, "offset"),
    ("read", {"limit": 1}, "path"),
    ("write", {"path": "x"}, "content"),
    ("edit", {"path": "x", "old_string": "", "new_string": "y"}, "old_string"),
    ("list", {"path": 3}, "path"),
    ("grep", {"pattern": "x", "surprise": True}, "surprise"),
    ("session", {}, "command"),
    ("process", {"action": "jump"}, "action"),
    ("process", {"action": "poll"}, "runId"),
]


def ok(name: str) -> None:
    print(f"ok {name}", flush=True)


def check(condition: bool, name: str, detail: object = "") -> None:
    if not condition:
        raise SystemExit(f"FAIL {name}: {detail}")
    ok(name)


@asynccontextmanager
async def connect(transport: str, target: list[str]):
    if transport == "stdio":
        params = StdioServerParameters(command=target[0], args=target[1:], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                yield session
    else:
        headers = {"Authorization": "Bearer " + os.environ["WARDEN_TOKEN"]}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120)) as client:
            async with streamable_http_client(target[0], http_client=client) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    yield session


async def handshake(session: ClientSession, version: str) -> types.InitializeResult:
    """`initialize` proposing `version`, then `notifications/initialized`."""
    result = await session.send_request(
        types.InitializeRequest(
            params=types.InitializeRequestParams(
                protocol_version=version,
                capabilities=types.ClientCapabilities(),
                client_info=types.Implementation(name="warden-conformance", version="1"),
            )
        ),
        types.InitializeResult,
    )
    session.adopt(result)
    await session.send_notification(types.InitializedNotification())
    return result


async def versions(transport: str, target: list[str]) -> None:
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        async with connect(transport, target) as session:
            result = await handshake(session, version)
            check(result.protocol_version == version, f"initialize {version}", result.protocol_version)
            check(result.server_info.name == "warden", f"server info {version}", result.server_info)
            await session.send_ping()
            ok(f"ping {version}")
            tools = (await session.list_tools()).tools
            check([t.name for t in tools] == TOOLS, f"tools/list {version}", [t.name for t in tools])
    for version in MODERN_PROTOCOL_VERSIONS:
        async with connect(transport, target) as session:
            result = await session.discover()
            check(version in result.supported_versions, f"server/discover {version}", result.supported_versions)
            r = await session.call_tool("exec", {"argv": ["echo", "modern"]})
            check(r.structured_content["stdout"] == "modern\n", f"tools/call {version}", r.structured_content)


def check_schemas(tools: list[types.Tool]) -> dict[str, Draft202012Validator]:
    validators = {}
    for tool in tools:
        for kind, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
            Draft202012Validator.check_schema(schema)
            check(schema.get("type") == "object", f"{tool.name} {kind} schema is a JSON Schema object")
            roots = [k for k in ("oneOf", "anyOf", "allOf", "not", "if", "then", "else") if k in schema]
            check(not roots, f"{tool.name} {kind} schema has a flat root", roots)
        a = tool.annotations
        check(tool.title and a and a.title, f"{tool.name} has a title", tool)
        check(a.read_only_hint == (tool.name in ("read", "list", "grep")), f"{tool.name} readOnlyHint", a)
        if tool.name in ("exec", "write", "edit"):
            check(a.destructive_hint is True, f"{tool.name} destructiveHint", a)
        check(a.open_world_hint is not None, f"{tool.name} openWorldHint", a)
        validators[tool.name] = Draft202012Validator(tool.output_schema)
    return validators


async def calls(session: ClientSession, validators: dict[str, Draft202012Validator]) -> None:
    def conforms(name: str, result: types.CallToolResult) -> dict:
        errors = list(validators[name].iter_errors(result.structured_content))
        check(not errors, f"{name} result conforms to its outputSchema", errors[:1])
        check(result.structured_content.get("message"), f"{name} result says what happened")
        return result.structured_content

    r = await session.call_tool("exec", {"argv": ["echo", "hello"]})
    v = conforms("exec", r)
    check(not r.is_error and v["status"] == "finished" and v["exitCode"] == 0, "exec allowed", v)
    text = r.content[0].text
    check(text.startswith("exit code 0") and "--- stdout (6 bytes) ---\nhello\n" in text
          and text.index("stdout") < text.index("stderr"), "exec content[0] is the whole result", text)
    first = v["runId"]

    r = await session.call_tool("exec", {"command": "echo no", "security": "deny"})
    v = conforms("exec", r)
    check(r.is_error and v["status"] == "denied" and v["exitCode"] == 77, "exec denied", v)
    check(v["message"].startswith("denied (") and v["rule"] in v["message"], "a denial says why in words", v)
    blocks = [c.text for c in r.content]
    check(len(blocks) == 2 and blocks[1].startswith("System events")
          and f"Exec finished (node=gateway, id={first}, code=0)" in blocks[1]
          and "hello" not in blocks[1], "events about a returned run are one line in their own block", blocks)

    r = await session.call_tool("exec", {"command": "echo asked", "ask": "always"})
    v = conforms("exec", r)
    check(r.is_error and v["reason"] == "no-approver" and v["exitCode"] == 75, "exec asked with no approver", v)

    r = await session.call_tool("exec", {"argv": ["printf", "ok \\377\\376 end"]})
    v = conforms("exec", r)
    check(base64.b64decode(v["stdoutBase64"]) == b"ok \xff\xfe end", "non-UTF-8 output is lossless", v)

    for name, arguments in VALID:
        r = await session.call_tool(name, arguments)
        v = conforms(name, r)
        check(not r.is_error and v["ok"] is True, f"{name} allowed", v)
    r = await session.call_tool("read", {"path": "/etc/passwd"})
    v = conforms("read", r)
    check(r.is_error and "denied" in v["error"], "read outside the workspace is refused", v)

    for name, arguments, field in INVALID:
        try:
            await session.call_tool(name, arguments)
        except MCPError as e:
            check(e.error.code == -32602 and f"`{field}`" in e.error.message,
                  f"{name} {arguments} refused naming {field}", e.error)
        else:
            raise SystemExit(f"FAIL {name} {arguments} was accepted")
    try:
        await session.call_tool("no-such-tool", {})
    except MCPError as e:
        check(e.error.code == -32602, "an unknown tool is invalid params", e.error)


async def progress(session: ClientSession) -> None:
    seen: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, message))

    started = time.monotonic()
    r = await session.call_tool(
        "exec",
        {"command": "for i in 1 2 3 4 5; do echo tick $i; sleep 0.3; done"},
        progress_callback=on_progress,
    )
    took = time.monotonic() - started
    check(r.structured_content["exitCode"] == 0, "the long run finished", r.structured_content)
    values = [v for v, _ in seen]
    check(len(seen) >= 2 and values == sorted(values), "progress notifications, increasing", seen)
    check(any(m and "running for" in m and "tick" in m for _, m in seen), "progress shows elapsed time and output", seen)
    # At most one per 500 ms, however long the run took on this machine.
    check(len(seen) <= took / 0.5 + 1, "progress is rate-limited", (took, seen))


async def cancel(session: ClientSession, marker: str) -> None:
    async with anyio.create_task_group() as group:
        async def call() -> None:
            await session.call_tool("exec", {"command": f"sleep {marker}", "timeout": 600})

        group.start_soon(call)
        deadline = time.monotonic() + 30
        while sleeps(marker) < 1:
            if time.monotonic() > deadline:
                raise SystemExit("FAIL the command to cancel never started")
            await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    gone_by = time.monotonic() + 5
    while sleeps(marker) > 0:
        if time.monotonic() > gone_by:
            raise SystemExit("FAIL the cancelled run is still going after 5 s")
        await anyio.sleep(0.01)
    ok("cancel stops the run")


async def main() -> None:
    transport, marker, *target = sys.argv[1:]
    await versions(transport, target)
    async with connect(transport, target) as session:
        await session.initialize()
        validators = check_schemas((await session.list_tools()).tools)
        await calls(session, validators)
        await progress(session)
        await cancel(session, marker + "1")
        await session.send_ping()
        ok("ping after all that")
        async with anyio.create_task_group() as group:
            async def hold() -> None:
                await session.call_tool("exec", {"command": f"sleep {marker}2", "timeout": 600})

            group.start_soon(hold)
            while sleeps(marker + "2") < 1:
                await anyio.sleep(0.02)
            print("holding", flush=True)
            await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main)
