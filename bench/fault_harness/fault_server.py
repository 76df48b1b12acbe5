"""A local OpenAI-compatible server that misbehaves one way on purpose, for the servers and secrets sections."""

from __future__ import annotations

import email.utils
import json
import math
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from flows.serve import free_port

LOCAL = "127.0.0.1"
# The clients must reach these servers directly, never through a proxy set in the environment.
os.environ["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), LOCAL, "localhost"]))

ANSWER = "<think>Done.</think>\n<answer>\nDay 1: from A to B\nTransport: -\n</answer>"
PLAN_JSON = json.dumps({"plan": [{"days": 1, "current_city": "from A to B", "transportation": "-", "breakfast": "-", "attraction": "-", "lunch": "-", "dinner": "-", "accommodation": "-"}]})


class FaultServer:
    """A local OpenAI-compatible server that misbehaves one way on every request.

    Modes: http500, malformed (invalid JSON), wrong_shape (valid JSON, not a
    completion: a 200 holding an error object), truncated (the body cut short, then the connection closed),
    rate429 (429 with Retry-After: `retry_after` seconds, or with `http_date` a date at
    least that far ahead; after `limit` such replies, if given, it answers as record does),
    hang (accepts and never answers), closed (nothing listens), record (answers well;
    the model "echo" gets a 400 whose body repeats the Authorization header, as some servers do).
    """

    def __init__(self, mode: str, retry_after: float = 1.0, http_date: bool = False, limit: int | None = None):
        self.mode = mode
        self.http_date = http_date
        self.limit = limit
        self.requests: list[dict] = []  # {"t" (monotonic), "wall", "auth", "body", and for a 429 "until": the wall time it asked to wait for}
        self._held: list[socket.socket] = []
        self._server = self._listener = None
        if mode == "closed":
            self.port = free_port()  # closed again once free_port returns
        elif mode == "hang":
            self._listener = socket.create_server((LOCAL, 0))
            self.port = self._listener.getsockname()[1]
            threading.Thread(target=self._hold, daemon=True).start()
        else:
            self._server = ThreadingHTTPServer((LOCAL, 0), self._handler(retry_after))
            self._server.daemon_threads = True
            self.port = self._server.server_address[1]
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.base_url = f"http://{LOCAL}:{self.port}/v1"

    def _hold(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.requests.append({"t": time.monotonic(), "wall": time.time(), "auth": "", "body": ""})
            self._held.append(conn)  # never read, never answered

    def _handler(self, retry_after: float):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
                auth = self.headers.get("Authorization", "")
                request = {"t": time.monotonic(), "wall": time.time(), "auth": auth, "body": body}
                fake.requests.append(request)
                mode = fake.mode
                if mode == "http500":
                    return self._send(500, json.dumps({"error": {"message": "internal error", "type": "server_error"}}).encode())
                if mode == "rate429" and (fake.limit is None or len(fake.requests) <= fake.limit):
                    if fake.http_date:  # whole seconds: the next full second, then `retry_after` more
                        request["until"] = math.floor(request["wall"]) + 1 + math.ceil(retry_after)
                        value = email.utils.formatdate(request["until"], usegmt=True)
                    else:
                        request["until"], value = request["wall"] + retry_after, f"{retry_after:g}"
                    return self._send(429, json.dumps({"error": {"message": "rate limited", "type": "rate_limit"}}).encode(), {"Retry-After": value})
                if mode == "malformed":
                    return self._send(200, b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assis')
                if mode == "wrong_shape":
                    return self._send(200, b'{"object": "error", "message": "upstream model failed"}')
                if mode == "truncated":
                    data = json.dumps(completion(ANSWER)).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 3])
                    self.close_connection = True  # the server closes the socket: the body ends early
                    return
                request = json.loads(body or "{}")
                if request.get("model") == "echo":
                    return self._send(400, json.dumps({"error": {"message": f"invalid request with credentials {auth}", "type": "invalid_request_error"}}).encode())
                content = PLAN_JSON if "response_format" in request else ANSWER
                return self._send(200, json.dumps(completion(content, request.get("model", "m"))).encode())

            def _send(self, status: int, data: bytes, headers: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def gaps(self) -> list[float]:
        times = [r["t"] for r in self.requests]
        return [b - a for a, b in zip(times, times[1:])]

    def waited_as_asked(self) -> bool | None:
        """Whether every request after a 429 came no earlier than its Retry-After asked; None without a retried 429."""
        pairs = [(a["until"], b["wall"]) for a, b in zip(self.requests, self.requests[1:]) if "until" in a]
        return all(wall >= until for until, wall in pairs) if pairs else None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._listener is not None:
            self._listener.close()
        for conn in self._held:
            conn.close()


def completion(content: str, model: str = "m") -> dict:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip
