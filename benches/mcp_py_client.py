"""Client-side CPU per MCP tool call with the Python SDK's own client (the `mcp` package), the
counterpart of benches/mcp_call.rs in the same sitting.

Usage: mcp_py_client.py CALLS MODE SERVER_ARGV...
  MODE: legacy (the initialize handshake) or a modern version such as 2026-07-28.

Starts the server over stdio, makes 50 warm-up calls of its `echo` tool, then CALLS calls one
after the other, and prints one JSON line: calls, this process's CPU seconds over those calls
(every thread, children excluded: the sum of /proc/self/task/*/schedstat, nanoseconds), and the
wall seconds.
"""

import asyncio
import json
import os
import sys
import time

from mcp import Client
from mcp.client.stdio import StdioServerParameters


def cpu_seconds() -> float:
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e9


async def main() -> None:
    calls = int(sys.argv[1])
    mode = sys.argv[2]
    argv = sys.argv[3:]
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(params, mode=mode) as client:
        for _ in range(50):
            await client.call_tool("echo", {"text": "warm"})
        c0, w0 = cpu_seconds(), time.perf_counter()
        for i in range(calls):
            r = await client.call_tool("echo", {"text": f"hello {i}"})
            if r.isError if hasattr(r, "isError") else r.is_error:
                raise SystemExit(f"call {i} failed: {r}")
        c1, w1 = cpu_seconds(), time.perf_counter()
    print(json.dumps({"calls": calls, "cpu_s": c1 - c0, "wall_s": w1 - w0}))


if __name__ == "__main__":
    asyncio.run(main())
