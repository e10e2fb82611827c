"""The dispatch payload: CRCR's pass-through ``client_payload`` of ``repository_dispatch``.

``POST /repos/{owner}/{repo}/dispatches`` with
``{"event_type": <event>, "client_payload": {"event_type", "delivery_id", "payload"}}``.
GitHub allows at most 10 top-level keys and < 64 KB in ``client_payload``; crcr keeps
CRCR's three keys and, when it had to trim, adds ``crcr_trimmed`` (a list of the JSON
pointers it removed) so the downstream knows.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MAX_CLIENT_PAYLOAD_BYTES = 64 * 1024 - 1
MAX_EVENT_TYPE_CHARS = 100


class ClientPayload(BaseModel):
    model_config = ConfigDict(extra="allow")

    event_type: str = Field(max_length=MAX_EVENT_TYPE_CHARS)
    delivery_id: str
    payload: dict[str, Any]
    crcr_trimmed: list[str] | None = None


class DispatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_type: str = Field(max_length=MAX_EVENT_TYPE_CHARS)
    client_payload: ClientPayload
