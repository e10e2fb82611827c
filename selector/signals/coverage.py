"""``coverage``: test files that, in our own coverage map, execute the torch code the diff changes.

The map (``selector.covmap``, shipped as data, rebuilt by ``crcr select coverage-map``)
records per upstream test file the torch functions it runs beyond importing torch. A
hunk names its function (git's hunk header, or the ``def`` enclosing a changed line):
a file that runs that very function scores 1; one that runs other code of the changed
file scores 0.3 (0.6 when the change gives no function: paths only, or module-level
lines). Each score is scaled by how few mapped files run it (inverse document
frequency), so code every test executes says little. Files the map has never run get
nothing from this signal: it can only speak for what was measured.
"""

from __future__ import annotations

import math
import re

from selector.signals.base import Change, Hit, Signal, Universe

_DEF = re.compile(r"\bdef\s+(\w+)")
MIN_SPECIFICITY = 0.1


def changed_functions(change: Change) -> dict[str, set[str]]:
    """Changed .py path -> names of the functions its hunks touch (empty: no function known)."""
    out: dict[str, set[str]] = {p: set() for p in change.paths if p.endswith(".py")}
    for d in change.diffs:
        if not d.path.endswith(".py"):
            continue
        names = out.setdefault(d.path, set())
        for h in d.hunks:
            names |= h.edited_defs
            names |= set(_DEF.findall(h.context))
    return out


def _specificity(n_files: int, n_mapped: int) -> float:
    if n_mapped < 2:
        return 1.0
    return max(MIN_SPECIFICITY, math.log(n_mapped / max(n_files, 1)) / math.log(n_mapped))


class CoverageSignal(Signal):
    name = "coverage"
    weight = 6.0

    def score(self, change: Change, universe: Universe) -> dict[str, Hit]:
        cmap = universe.coverage
        if cmap is None or not cmap.tests:
            return {}
        n_mapped = len(cmap.tests)
        out: dict[str, Hit] = {}
        for path, funcs in sorted(changed_functions(change).items()):
            covering = {f: fs for f, fs in cmap.covering(path).items() if f in universe.durations}
            if not covering:
                continue
            file_spec = _specificity(len(covering), n_mapped)
            running = {f for f, fs in covering.items() if funcs & fs}
            fn_spec = _specificity(len(running), n_mapped)
            for f, fs in sorted(covering.items()):
                hit = sorted(funcs & fs)
                if hit:
                    s, why = fn_spec, f"runs {hit[0]}() of {path}" + (f" and {len(hit) - 1} more changed" if len(hit) > 1 else "")
                elif funcs:
                    s, why = 0.3 * file_spec, f"runs {path}, not the changed {sorted(funcs)[0]}()"
                else:
                    s, why = 0.6 * file_spec, f"runs code of {path}"
                s = round(min(1.0, s), 4)
                if f not in out or s > out[f].score:
                    out[f] = Hit(s, why + f" (coverage map, {len(covering)} of {n_mapped} mapped files run {path})")
        return out
