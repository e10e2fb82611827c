"""``crcr select upgrade``: compare two inventories by fingerprint and re-plan only what changed.

Test-level inventories compare test by test. OpInfo-level inventories (two torch
versions read statically, e.g. the installed 2.13.0 against the 2.14.1 wheel) compare
OpInfo entries; with a test-level inventory alongside, every test whose op was added
or changed counts as changed, so the re-evaluated set is what a plan must revisit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crcr.contracts.inventory import Inventory, InventoryTest


@dataclass
class InventoryDiff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {k: len(getattr(self, k)) for k in ("added", "removed", "changed", "unchanged")}

    @property
    def to_reevaluate(self) -> list[str]:
        return sorted(self.added + self.changed)


def _key(test: InventoryTest, granularity: str) -> str:
    # OpInfo pseudo-tests are keyed by op so an entry moving between files is not "removed + added".
    return test.op or test.id if granularity == "opinfo" else test.id


def compare(old: Inventory, new: Inventory) -> InventoryDiff:
    """Added / removed / changed / unchanged, by id (or by op for OpInfo inventories).

    When the new OpInfo inventory holds expressions whose entries could not be evaluated statically, an
    entry it lacks may be one of those: it counts as changed (its tests are re-evaluated), not removed.
    """
    gran = "opinfo" if old.granularity == new.granularity == "opinfo" else "test"
    if gran == "opinfo" and old.device != new.device:
        from selector.errors import SelectorInputError

        raise SelectorInputError(
            f"the two OpInfo inventories were read for different devices ({old.device or 'every device'}, "
            f"{new.device or 'every device'}): their fingerprints do not compare", hint="read both for the same --device")
    unknown_in_new = gran == "opinfo" and any(e.error_class == "NotEvaluated" and not e.missing for e in new.errors)
    a = {_key(t, gran): t.fingerprint for t in old.tests}
    b = {_key(t, gran): t.fingerprint for t in new.tests}
    diff = InventoryDiff()
    for key in sorted(set(a) | set(b)):
        if key not in a:
            diff.added.append(key)
        elif key not in b:
            (diff.changed if unknown_in_new else diff.removed).append(key)
        elif a[key] != b[key]:
            diff.changed.append(key)
        else:
            diff.unchanged.append(key)
    return diff


def project_opinfo(op_diff: InventoryDiff, tests: Inventory) -> InventoryDiff:
    """Map an OpInfo-level diff onto a test-level inventory: tests of changed/added ops change."""
    touched = set(op_diff.changed) | set(op_diff.added)
    removed = set(op_diff.removed)
    out = InventoryDiff()
    for t in sorted(tests.tests, key=lambda t: t.id):
        if t.op and t.op in removed:
            out.removed.append(t.id)
        elif t.op and t.op in touched:
            out.changed.append(t.id)
        else:
            out.unchanged.append(t.id)
    return out


def with_new_opinfo(tests: Inventory, old_ops: Inventory, new_ops: Inventory) -> Inventory:
    """``tests`` as the new torch version would have them, from two OpInfo-level inventories.

    A test whose op's entry changed gets a new fingerprint (its old one combined with the new
    entry's); tests of unchanged ops keep theirs, so the plan cache re-classifies exactly the
    tests of added or changed ops; tests of removed ops are dropped.
    """
    from selector.fingerprint import combine

    old_fps = {t.op: t.fingerprint for t in old_ops.tests if t.op}
    new_fps = {t.op: t.fingerprint for t in new_ops.tests if t.op}
    out = []
    for t in tests.tests:
        if not t.op or (t.op not in old_fps and t.op not in new_fps):
            out.append(t)  # not an OpInfo test (or an op neither version defines statically)
        elif t.op not in new_fps:
            continue  # the op's entry is gone in the new version
        elif old_fps.get(t.op) == new_fps[t.op]:
            out.append(t)
        else:
            out.append(t.model_copy(update={"opinfo_fingerprint": new_fps[t.op],
                                            "fingerprint": combine([t.fingerprint, new_fps[t.op]])}))
    return tests.model_copy(update={"tests": out, "torch_version": new_ops.torch_version})
