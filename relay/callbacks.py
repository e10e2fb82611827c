"""``POST /callback``: downstream jobs report their state (CRCR's callback contract).

Filled in by the callbacks module; the router is mounted by ``relay.app``.
"""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
