#!/usr/bin/env python3
"""A stand-in for an OpenAI-compatible model server, for trying agent jobs without an API key.

    python3 examples/echo-model.py            # listens on http://127.0.0.1:8089/v1
    python3 examples/echo-model.py 9000       # another port

It answers every POST /v1/chat/completions with a short reply that quotes the start of the prompt,
and reports token usage (about one token per four characters), so cronsole prices, budgets and
records the call as it would a real one. Standard library only; stop it with Ctrl-C.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if not self.path.endswith("/chat/completions"):
            self.send_error(404, "only /v1/chat/completions is served")
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self.send_error(400, "the body is not JSON")
            return
        messages = req.get("messages") or []
        prompt = " ".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
        first = " ".join(prompt.split())[:120]
        reply = f"(echo-model) I read {len(prompt)} characters starting: {first}"
        limit = req.get("max_tokens") or req.get("max_completion_tokens")
        if limit:
            reply = reply[: 4 * int(limit)]
        prompt_chars = sum(len(str(m.get("content", ""))) for m in messages)
        body = json.dumps({
            "id": "chatcmpl-echo",
            "object": "chat.completion",
            "model": req.get("model", "echo"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": reply}}],
            "usage": {"prompt_tokens": max(1, prompt_chars // 4),
                      "completion_tokens": max(1, len(reply) // 4),
                      "total_tokens": max(1, prompt_chars // 4) + max(1, len(reply) // 4)},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("echo-model: " + (fmt % args) + "\n")


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8089
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"echo-model: serving http://127.0.0.1:{port}/v1 (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
