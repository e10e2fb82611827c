"""FastAPI dependencies every router shares (``Annotated`` aliases for ``Depends``).

    from relay.deps import SessionDep, SettingsDep, AllowlistDep, ClockDep, MetricsDep, RuntimeDep

    @router.post("/callback")
    def callback(session: SessionDep, allow: AllowlistDep, now: ClockDep): ...

``SessionDep`` is a SQLAlchemy ``Session`` closed after the request (commit yourself);
``ClockDep`` is the current UTC time from the app's injected clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from crcr.settings import Settings
from relay.allowlist import Allowlist
from relay.metrics import RelayMetrics
from relay.runtime import Runtime


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


def get_settings(request: Request) -> Settings:
    return request.app.state.runtime.settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.runtime.sessions() as session:
        yield session


def get_allowlist(request: Request) -> Allowlist:
    return request.app.state.runtime.allowlist.get()


def get_now(request: Request) -> dt.datetime:
    return request.app.state.runtime.clock()


def get_metrics(request: Request) -> RelayMetrics:
    return request.app.state.runtime.metrics


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
AllowlistDep = Annotated[Allowlist, Depends(get_allowlist)]
ClockDep = Annotated[dt.datetime, Depends(get_now)]
MetricsDep = Annotated[RelayMetrics, Depends(get_metrics)]
