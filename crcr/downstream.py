"""The downstream half of the loop (pick -> run -> report), composed from components.

A ``local`` allowlist target runs ``crcr downstream`` with the dispatch payload
(CRCR's ``client_payload``) on standard input. For now it validates the payload and
records it under ``<data_dir>/downstream/received/`` so a user sees what arrived; the
pick -> run -> report pipeline is built on this entry point later.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from pydantic import ValidationError

from crcr.contracts.dispatch import ClientPayload
from crcr.errors import ContractError
from crcr.fileio import atomic_write_text

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def parse_client_payload(text: str) -> ClientPayload:
    """Validate a dispatch payload; a ContractError says which field is wrong."""
    try:
        return ClientPayload.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ContractError(f"the dispatch payload is not CRCR's client_payload: {where}: {first['msg']}",
                            hint="expected {event_type, delivery_id, payload} as JSON on stdin") from exc


def record_dispatch(payload: ClientPayload, data_dir: Path, *, backend: str) -> Path:
    """Write the received dispatch to ``<data_dir>/downstream/received/`` and return the path.

    The file name comes from the delivery id, made filesystem-safe and suffixed with a
    hash so distinct ids never collide and no id can escape the directory.
    """
    digest = hashlib.sha256(payload.delivery_id.encode()).hexdigest()[:12]
    name = f"{_SAFE.sub('_', payload.delivery_id)[:80]}-{digest}.json"
    path = data_dir / "downstream" / "received" / _SAFE.sub("_", backend)[:40] / name
    record = {"backend": backend, "client_payload": payload.model_dump(exclude_none=True)}
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path
