"""An MCP client built on the official Python SDK (`pip install mcp`), driven by
Warden's end-to-end cancellation tests (tests/cancellation.rs).

    mcp_cancel.py stdio|http MODE MARKER HOST COMMAND...

Connects to Warden — over stdio by running COMMAND (`warden mcp ...`), or over
Streamable HTTP at COMMAND[0] with the bearer token in $WARDEN_TOKEN — and calls the
`exec` tool on HOST with a command that runs `sleep MARKER` twice, once in a new session
(setsid). When both sleeps run it prints `running` and then, by MODE:

  cancel   abandons the call the SDK's way (cancelling the task that awaits it, which
           sends `notifications/cancelled`), prints `gone_ms N` once both sleeps are
           gone, then calls `exec` again and prints `events <json>` with the system
           events those calls delivered;
  hold     waits to be killed (the test kills this client).
"""

import json
import os
import sys
import time

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def sleeps(marker: str) -> int:
    """How many processes have exactly the command line `sleep MARKER`."""
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().rstrip(b"\0").split(b"\0") == [b"sleep", marker.encode()]:
                    count += 1
        except OSError:
            pass
    return count


async def drive(session: ClientSession, mode: str, marker: str, host: str) -> None:
    await session.initialize()
    command = f"setsid sleep {marker} & sleep {marker}"
    async with anyio.create_task_group() as group:
        async def call() -> None:
            await session.call_tool("exec", {"command": command, "host": host, "timeout": 600})

        group.start_soon(call)
        deadline = time.monotonic() + 30
        while sleeps(marker) < 2:
            if time.monotonic() > deadline:
                raise SystemExit("the command never started")
            await anyio.sleep(0.02)
        print("running", flush=True)
        if mode == "hold":
            await anyio.sleep_forever()
        group.cancel_scope.cancel()
        cancelled_at = time.monotonic()
    while sleeps(marker) > 0:
        if time.monotonic() - cancelled_at > 30:
            raise SystemExit("the cancelled command is still running after 30 s")
        await anyio.sleep(0.005)
    print(f"gone_ms {(time.monotonic() - cancelled_at) * 1000:.0f}", flush=True)
    # Later results carry the session's events, the cancelled run's among them (over
    # HTTP the cancellation may be reported just after the next call began).
    events: list[str] = []
    for _ in range(3):
        result = await session.call_tool("exec", {"command": "true", "host": host})
        events += result.structured_content["events"]
        if any("cancelled" in e for e in events):
            break
    print("events " + json.dumps(events), flush=True)


async def main() -> None:
    transport, mode, marker, host, *command = sys.argv[1:]
    if transport == "stdio":
        params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await drive(session, mode, marker, host)
    else:
        headers = {"Authorization": "Bearer " + os.environ["WARDEN_TOKEN"]}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(600)) as client:
            async with streamable_http_client(command[0], http_client=client) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await drive(session, mode, marker, host)


if __name__ == "__main__":
    anyio.run(main)
