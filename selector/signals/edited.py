"""``edited-test``: the PR edits an upstream test file; such a file is always picked."""

from __future__ import annotations

from selector.signals.base import Change, Hit, Signal, Universe


def edited_test_files(change: Change) -> list[str]:
    """Changed ``test/**/*.py`` files that hold tests (not helpers such as conftest.py)."""
    out = []
    for p in change.paths:
        name = p.rsplit("/", 1)[-1]
        if p.startswith("test/") and name.endswith(".py") and name.startswith("test_"):
            out.append(p)
    return sorted(out)


class EditedTests(Signal):
    name = "edited-test"
    weight = 100.0

    def score(self, change: Change, universe: Universe) -> dict[str, Hit]:
        by_path = {d.path: d for d in change.diffs}
        out: dict[str, Hit] = {}
        for path in edited_test_files(change):
            d = by_path.get(path)
            defs = sorted({name for h in d.hunks for name in h.edited_defs}) if d else []
            tests = tuple(sorted(t.id for t in universe.tests.get(path, ())
                                 if (t.template or t.method) in defs))
            what = f"the PR edits this test file ({', '.join(defs[:3])})" if defs else "the PR edits this test file"
            out[path] = Hit(1.0, what, tests)
        return out
