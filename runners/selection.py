"""Which collected tests this run executes, in what order (inside the pytest subprocess)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crcr.contracts.pick import load_pick
from crcr.contracts.plan import Plan, load_plan
from runners import sharding
from runners.runconfig import RunConfig


def load_plan_or_none(cfg: RunConfig) -> Plan | None:
    return load_plan(cfg.plan_dir) if cfg.plan_dir else None


UNPLANNED_POLICIES = ("error", "skip", "run")


def unplanned_decision(policy: str, file: str) -> tuple[str, str]:
    """(mode, reason) for a test of ``file``, which no plan file covers, under ``--unplanned``."""
    if policy == "run":
        return "run", f"no plan file covers {file}; run under --unplanned run"
    return "skip", f"no plan file covers {file}; skipped under --unplanned {policy}"


def narrow(items: list[Any], cfg: RunConfig, plan: Plan | None = None) -> tuple[list[Any], list[Any]]:
    """(kept in run order, deselected). Resume ids > --id > pick > shard.

    Shards weigh tests the plan skips at a millisecond: a skip costs next to nothing.
    """
    by_id = {item.nodeid: item for item in items}
    if cfg.only_ids_path:
        wanted = json.loads(Path(cfg.only_ids_path).read_text(encoding="utf-8"))
        keep = [by_id[i] for i in wanted if i in by_id]
        return keep, _rest(items, keep)
    keep = list(items)
    if cfg.ids:
        wanted_ids = set(cfg.ids)
        keep = [i for i in keep if i.nodeid in wanted_ids]
    if cfg.pick_path:
        pick = load_pick(cfg.pick_path)
        order = {t.id: n for n, t in enumerate(pick.tests)}
        keep = sorted((i for i in keep if i.nodeid in order), key=lambda i: order[i.nodeid])
        missing = set(order) - set(by_id)
        if missing:
            # a pick made for another torch or checkout names tests that do not exist here
            cfg.pick_missing = sorted(missing)
    if cfg.shard:
        index, count = cfg.shard
        ids = [i.nodeid for i in keep]
        durations = sharding.load_test_durations(cfg.durations_paths) if cfg.durations_paths else {}
        file_times = sharding.load_file_times() if not durations else {}
        weighted = sharding.weights(ids, durations, file_times)
        if plan is not None:
            weighted = {i: (0.001 if plan.resolve(i).mode == "skip" else w) for i, w in weighted.items()}
        mine = set(sharding.shard_of(ids, index, count, weighted))
        keep = [i for i in keep if i.nodeid in mine]
    return keep, _rest(items, keep)


def _rest(items: list[Any], keep: list[Any]) -> list[Any]:
    kept = {id(i) for i in keep}
    return [i for i in items if id(i) not in kept]
