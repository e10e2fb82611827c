"""What the driver tells the pytest plugin: one JSON file named by ``CRCR_RUN_CONFIG``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RunConfig(BaseModel):
    """Settings of one pytest subprocess under ``crcr run`` (internal, not a published contract)."""

    model_config = ConfigDict(extra="forbid")

    device: str
    source: str = "embedded"  # embedded | pytorch-src
    events_path: str
    crash_path: str
    plan_dir: str | None = None
    pick_path: str | None = None
    shard: tuple[int, int] | None = None  # (index from 1, count)
    durations_paths: list[str] = []
    only_ids_path: str | None = None  # resume after a crash: exactly these ids, in order
    ids: list[str] = []  # --id selections
    timeout_s: float | None = 300.0
    rerun_failures: bool = True
    inventory_path: str | None = None
    repro_prefix: str = "crcr run"
    overlay_dir: str | None = None  # torch Python sources of the commit under test (runners.overlay)
    unplanned: str = "error"  # with a plan, tests of files it does not cover: error | skip | run
    pick_missing: list[str] = []  # filled in the child: picked ids that were not collected
