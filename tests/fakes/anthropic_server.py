"""A local HTTP server speaking Anthropic's Messages API (``POST /v1/messages``), tool use included.

Driven by the real ``anthropic`` client (``base_url`` pointed here). A *script* — a
callable taking the request body and returning the list of content blocks — plays the
model, so tests can be honest, hostile or gullible models. Every request is recorded
(headers and body) for assertions. Authentication accepts ``x-api-key`` or
``Authorization: Bearer``, as the SDK may send either; a wrong key gets the API's 401
error shape. ``fail_next`` queues HTTP errors (e.g. 529 overloaded) for retry tests.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Script = Callable[[dict[str, Any]], list[dict[str, Any]]]


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use(name: str, tool_input: dict[str, Any], n: int) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{n:04d}", "name": name, "input": tool_input}


class FakeAnthropic:
    """Start with ``with FakeAnthropic(script, api_key=...) as fake: fake.url``."""

    def __init__(self, script: Script, api_key: str = "sk-ant-test-key", model_tokens: tuple[int, int] = (100, 20)) -> None:
        self.script = script
        self.api_key = api_key
        self.tokens = model_tokens
        self.requests: list[dict[str, Any]] = []
        self.fail_next: list[int] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("request-id", f"req_{len(fake.requests):04d}")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/messages":
                    self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such path"}})
                    return
                key = self.headers.get("x-api-key")
                auth = self.headers.get("authorization", "")
                if key is None and auth.lower().startswith("bearer "):
                    key = auth[7:]
                if key != fake.api_key:
                    self._send(401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
                    return
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad JSON"}})
                    return
                with fake._lock:
                    fake.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                    status = fake.fail_next.pop(0) if fake.fail_next else None
                if status is not None:
                    self._send(status, {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}})
                    return
                for field in ("model", "max_tokens", "messages"):
                    if field not in body:
                        self._send(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                      "message": f"{field}: field required"}})
                        return
                content = fake.script(body)
                stop = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
                self._send(200, {
                    "id": f"msg_{len(fake.requests):04d}", "type": "message", "role": "assistant",
                    "model": body["model"], "content": content, "stop_reason": stop, "stop_sequence": None,
                    "usage": {"input_tokens": fake.tokens[0], "output_tokens": fake.tokens[1]},
                })

        return Handler
