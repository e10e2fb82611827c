"""The pytest plugin ``crcr run`` loads into its pytest subprocess (``-p runners.plugin``).

It reads its settings from the JSON file named by ``CRCR_RUN_CONFIG`` (written by
``runners.driver``) and:

- installs the device under test before any test module imports
  ``torch.testing._internal`` (snpu through ``runners.devices``);
- narrows and orders the collected tests: ids to resume with after a crash, else the
  pick file's order, then the shard (``runners.sharding``);
- applies the plan through ``crcr.contracts.plan`` (the one resolver): ``skip`` and
  ``xfail`` markers carrying the plan's reason, ``xfail_strict`` failing on an
  unexpected pass;
- arms a per-test watchdog (``faulthandler.dump_traceback_later``) so a hang ends the
  process with a traceback the supervisor records;
- reruns a failed test once: failed then passed is ``flaky``;
- streams one JSON line per event (collected, start, result, done) to the events file,
  flushed at once, so the supervisor (``runners.isolation``) knows the culprit when
  the interpreter dies.

With ``--collect-only`` it writes the inventory (``runners.inventory``) instead.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from runners import outcomes
from runners.runconfig import RunConfig

_STASH_DECISION = pytest.StashKey[dict[str, str]]()


class CrcrPlugin:
    """State of one pytest session under ``crcr run``."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self._events = open(cfg.events_path, "a", encoding="utf-8")
        self._crash = open(cfg.crash_path, "a", encoding="utf-8")
        self._counters = None
        self._collection_errors: list[Any] = []  # crcr.contracts.inventory.InventoryError per file
        self._failed_subtests: list[Any] = []  # the running attempt's failing subtest reports

    # -- events ---------------------------------------------------------------------
    def emit(self, kind: str, **data: Any) -> None:
        self._events.write(json.dumps({"kind": kind, **data}, default=str) + "\n")
        self._events.flush()

    # -- setup ------------------------------------------------------------------------
    def pytest_configure(self, config: pytest.Config) -> None:
        from runners import devices

        # faulthandler writes tracebacks of a segfault or abort where the supervisor reads them
        faulthandler.enable(file=self._crash, all_threads=False)
        if self.cfg.overlay_dir:  # before the device and the test modules bind torch's functions
            from runners import overlay

            applied = overlay.apply(Path(self.cfg.overlay_dir))
            self.emit("overlay", replaced=applied.replaced, skipped=applied.skipped)
        devices.prepare_in_child(self.cfg.device)
        self._counters = devices.counters_for(self.cfg.device)

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        if isinstance(collector, pytest.Module):
            _reset_privateuse1_naming()

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # an upstream file that fails to import is one error for that file, not a dead run
        if report.failed:
            import sys

            from crcr.contracts.inventory import parse_import_failure

            torch = sys.modules.get("torch")
            failure = parse_import_failure(report.nodeid or "<collection>", report.longreprtext,
                                           getattr(torch, "__version__", None))
            self._collection_errors.append(failure)
            self.emit(
                "result",
                id=report.nodeid or "<collection>",
                outcome="error",
                error_class="CollectionError",
                # the first line names what the installed torch lacks; pytest's text follows
                message=failure.describe()[:300] + "\n" + (outcomes.excerpt(report.longreprtext) or "")[-1600:],
                duration_s=0.0,
                missing=failure.missing,
                module=failure.module,
            )

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list) -> None:
        from runners import selection

        total = len(items)
        plan = selection.load_plan_or_none(self.cfg)
        keep, deselected = selection.narrow(items, self.cfg, plan)
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        items[:] = keep
        unplanned: dict[str, int] = {}
        for item in items:
            if plan is not None:
                decision = plan.resolve(item.nodeid)
                mode, reason = decision.mode, decision.reason
                if decision.source == "unplanned":
                    file = item.nodeid.split("::", 1)[0]
                    unplanned[file] = unplanned.get(file, 0) + 1
                    mode, reason = selection.unplanned_decision(self.cfg.unplanned, file)
                item.stash[_STASH_DECISION] = {"mode": mode, "reason": reason, "source": decision.source}
                _apply_decision(item, mode, reason, decision.source)
        if unplanned and self.cfg.unplanned == "error" and not config.option.collectonly:
            # refuse before running anything: a run that silently skips whole files is not green
            config.hook.pytest_deselected(items=list(items))
            items[:] = []
            self.emit("unplanned", files=unplanned, total=sum(unplanned.values()))
        if config.option.collectonly and self.cfg.inventory_path:
            from runners import inventory

            inventory.write_inventory(items, self.cfg, self._collection_errors)
        import torch

        self.emit(
            "collected",
            ids=[item.nodeid for item in items],
            total=total,
            pick_missing=self.cfg.pick_missing[:50],
            pick_missing_count=len(self.cfg.pick_missing),
            torch_version=torch.__version__,
            torch_git=getattr(torch.version, "git_version", None),
        )

    # -- running ----------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = (yield).get_result()
        if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
            report.crcr_error_class = outcomes.error_class(call.excinfo.value)
            report.crcr_message = call.excinfo.exconly()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        self.emit("start", id=item.nodeid, t=time.time())
        started = time.perf_counter()
        attempts: list[str] = []
        counters = self._counters() if self._counters else None
        # counters cover every attempt of the test (a rerun costs device time too)
        with counters if counters is not None else contextlib.nullcontext():
            reports = self._attempt(item, nextitem)
            verdict = outcomes.with_subtests(outcomes.classify(reports), self._failed_subtests)
            attempts.append(verdict.outcome)
            if self.cfg.rerun_failures and verdict.outcome in ("failed", "error") and verdict.rerunnable:
                item._initrequest()  # fresh fixtures for the second attempt
                reports = self._attempt(item, nextitem)
                second = outcomes.with_subtests(outcomes.classify(reports), self._failed_subtests)
                attempts.append(second.outcome)
                if second.outcome == "passed":
                    verdict = outcomes.Verdict("flaky", verdict.error_class, verdict.message, False)
                else:
                    verdict = second
        for report in reports:
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        decision = item.stash.get(_STASH_DECISION, None) or {}
        self.emit(
            "result",
            id=item.nodeid,
            outcome=verdict.outcome,
            duration_s=round(time.perf_counter() - started, 6),
            error_class=verdict.error_class,
            message=verdict.message,
            attempts=attempts if len(attempts) > 1 else [],
            plan_mode=decision.get("mode"),
            plan_reason=decision.get("reason"),
            plan_source=decision.get("source"),
            counters=counters.snapshot() if counters is not None else None,
        )
        return True

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # pytest reports each failing ``self.subTest(...)`` block as it happens, not in runtestprotocol's list
        # (under an xfail mark a failing subtest is reported skipped, with ``wasxfail``)
        if type(report).__name__ == "SubtestReport" and (report.failed or (report.skipped and hasattr(report, "wasxfail"))):
            self._failed_subtests.append(report)

    def _attempt(self, item: pytest.Item, nextitem: pytest.Item | None) -> list:
        from _pytest.runner import runtestprotocol

        self._failed_subtests = []
        if self.cfg.timeout_s:
            # a watchdog thread: dumps every thread's stack and exits even when the test
            # is stuck in C code; the supervisor records this test as a timeout error
            faulthandler.dump_traceback_later(self.cfg.timeout_s, exit=True, file=self._crash)
        try:
            return runtestprotocol(item, nextitem=nextitem, log=False)
        finally:
            if self.cfg.timeout_s:
                faulthandler.cancel_dump_traceback_later()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.emit("done", exitstatus=int(exitstatus))
        self._events.close()


def _reset_privateuse1_naming() -> None:
    """Keep ``PRIVATEUSE1`` in class names for every file, as upstream CI collects them.

    torch's PrivateUse1TestBase renames its ``device_type`` to the backend's name
    (``snpu``) once a device class is set up, so in one process the second file would be
    named ``TestCommonSNPU`` while upstream, which runs each file in its own process,
    always says ``TestCommonPRIVATEUSE1``. Resetting it before each module is imported
    keeps ids the same however files are grouped.
    """
    import sys

    module = sys.modules.get("torch.testing._internal.common_device_type")
    base = getattr(module, "PrivateUse1TestBase", None) if module is not None else None
    if base is not None and base.__dict__.get("device_type") != "privateuse1":
        base.device_type = "privateuse1"


def _apply_decision(item: pytest.Item, mode: str, reason: str, source: str) -> None:
    text = f"plan ({source}): {reason}"
    if mode == "skip":
        item.add_marker(pytest.mark.skip(reason=text))
    elif mode == "xfail":
        item.add_marker(pytest.mark.xfail(reason=text, strict=False, run=True))
    elif mode == "xfail_strict":
        item.add_marker(pytest.mark.xfail(reason=text, strict=True, run=True))


def pytest_configure(config: pytest.Config) -> None:
    """Register the plugin object when ``CRCR_RUN_CONFIG`` names a run configuration."""
    path = os.environ.get("CRCR_RUN_CONFIG")
    if not path:
        return
    cfg = RunConfig.model_validate_json(Path(path).read_text(encoding="utf-8"))
    plugin = CrcrPlugin(cfg)
    config.pluginmanager.register(plugin, "crcr-run")
    # pytest_configure of a plugin registered during configure is called by pluggy's historic call
