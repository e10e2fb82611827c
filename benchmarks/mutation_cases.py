"""Mutation cases for ``crcr select evaluate``: a fault in one torch Python module, through an overlay.

The installed torch is never modified. Each mutant is a mutated copy of one module in a
temporary directory; a ``sitecustomize.py`` on ``PYTHONPATH`` installs an import hook
that loads that one module from the copy. The candidate upstream test files (read into
a scratch checkout, never committed) run once without and once with the mutant; the
tests that pass without it and fail with it are the case's failing tests. Mutants no
test notices are reported and left out.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/mutation_cases.py \\
        --checkout /work/scratch/i11-pick/upstream --out benchmarks/cases/mutation.jsonl
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import resource
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

A = "utils/_appending_byte_serializer.py"
M = "utils/module_tracker.py"
C = "nn/modules/container.py"
MOD = "nn/modules/module.py"
# (case id, file under torch/, text, replacement): each text occurs exactly once.
MUTATIONS = [
    ("abs-write-little-endian", A, 'i.to_bytes(8, byteorder="big", signed=False)', 'i.to_bytes(8, byteorder="little", signed=False)'),
    ("abs-read-step", A, "self._i += 8", "self._i += 7"),
    ("abs-write-str-upper", A, 'base64.b64encode(s.encode("utf-8"))', 'base64.b64encode(s.upper().encode("utf-8"))'),
    ("abs-bytes-len-off", A, "self.write_uint64(len(b))", "self.write_uint64(len(b) + 1)"),
    ("abs-read-bytes-skip", A, "self._i += size", "self._i += size + 1"),
    ("abs-version-zero", A, "_ENCODING_VERSION: int = 1", "_ENCODING_VERSION: int = 0"),
    ("abs-extend-drops-last", A, "for elem in elems:", "for elem in list(elems)[:-1]:"),
    ("abs-finished-early", A, "return len(self._data) == self._i", "return len(self._data) <= self._i + 8"),
    ("abs-checksum-reversed", A, "self._data[0:CHECKSUM_DIGEST_SIZE] = digest", "self._data[0:CHECKSUM_DIGEST_SIZE] = digest[::-1]"),
    ("abs-read-str-truncated", A, 'return base64.b64decode(self.read_bytes()).decode("utf-8")',
     'return base64.b64decode(self.read_bytes()).decode("utf-8")[:-1]'),
    ("abs-append-twice", A, "self._serialize_fn(self._writer, data)",
     "self._serialize_fn(self._writer, data)\n        self._serialize_fn(self._writer, data)"),
    ("abs-clear-no-version", A, "        self._writer.write_uint64(_ENCODING_VERSION)\n", "        pass\n"),
    ("mt-extra-root", M, 'self.parents = {"Global"}\n        self._known_modules', 'self.parents = {"Global", "Root"}\n        self._known_modules'),
    ("mt-slash-names", M, 'self._known_modules[submod] = f"{mod_name}.{name}"', 'self._known_modules[submod] = f"{mod_name}/{name}"'),
    ("mt-lower-names", M, "self._known_modules[mod] = type(mod).__name__", "self._known_modules[mod] = type(mod).__name__.lower()"),
    ("mt-add-prefix-only", M, "            self.parents.add(name)", '            self.parents.add(name.split(".")[0])'),
    ("mt-no-pop-in-bw", M, "            if name in self.parents:\n                self.parents.remove(name)",
     "            if name in self.parents and not is_bw:\n                self.parents.remove(name)"),
    ("mt-is-bw-inverted", M, "return torch._C._current_graph_task_id() != -1", "return torch._C._current_graph_task_id() == -1"),
    ("mt-callback-when-fw", M, "            if is_bw:\n                self._maybe_set_engine_callback()",
     "            if not is_bw:\n                self._maybe_set_engine_callback()"),
    ("mt-bw-pre-appends", M, "register_multi_grad_hook(tensors, self._get_pop_fn(name, True))",
     "register_multi_grad_hook(tensors, self._get_append_fn(name, True))"),
    ("mt-reset-empty", M, 'self.parents = {"Global"}\n            self._has_callback = False', 'self.parents = set()\n            self._has_callback = False'),
    ("mt-no-child-names", M, "            for name, submod in mod.named_children():", "            for name, submod in []:"),
    ("mt-exit-keeps-post-hook", M, "        self._fw_post_handle.remove()\n", "        pass\n"),
    ("mt-pop-wrong-flag", M, "        self._get_pop_fn(name, False)()", "        self._get_pop_fn(name, True)()"),
    ("mt-post-hook-no-bw", M, "register_multi_grad_hook(tensors, self._get_append_fn(name, True))",
     "register_multi_grad_hook(tensors, lambda *a: None)"),
    ("ct-list-getitem-first", C, "return self._modules[self._get_abs_string_index(idx)]", "return self._modules[self._get_abs_string_index(0)]"),
    ("ct-list-negative-index", C, "        if idx < 0:\n            idx += len(self)\n        return str(idx)",
     "        if idx < 0:\n            idx += len(self) - 1\n        return str(idx)"),
    ("ct-list-setitem-noop", C, "return setattr(self, str(idx), module)", "return None"),
    ("ct-dict-getitem-lower", C, "return self._modules[key]", "return self._modules[key.lower()]"),
    ("ct-list-range-check", C, "if not (-len(self) <= idx < len(self)):", "if not (-len(self) <= idx <= len(self)):"),
    ("mod-global-pre-hook-dropped", MOD, "    _global_forward_pre_hooks[handle.id] = hook\n", "    pass\n"),
    ("mod-global-post-hook-dropped", MOD, "    _global_forward_hooks[handle.id] = hook\n", "    pass\n"),
]
RUN_TIMEOUT_S = 150
LOOPING = {"abs-read-step", "abs-bytes-len-off", "abs-read-bytes-skip"}  # the reader never finishes
MEMORY_LIMIT = 6_000_000_000  # address space: a mutant that loops while allocating dies, the machine is shared


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


HOOK = '''
import importlib.abc, importlib.util, os, sys
_TARGET, _PATH = os.environ["CRCR_MUTANT_MODULE"], os.environ["CRCR_MUTANT_PATH"]
class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname == _TARGET:
            return importlib.util.spec_from_file_location(fullname, _PATH)
        return None
sys.meta_path.insert(0, _Finder())
'''


def _run(checkout: Path, files: list[str], env_extra: dict[str, str], junit: Path) -> dict[str, str]:
    """Test id (``test/<file>.py::Class::name``) -> passed / failed / skipped, run from the checkout's root."""
    env = {**os.environ, **env_extra}
    try:
        subprocess.run([sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "--rootdir", str(checkout),
                        "-o", "addopts=", "-o", "junit_family=xunit1", f"--junitxml={junit}", "--timeout=60"],
                       cwd=checkout, env=env, capture_output=True, text=True, check=False, timeout=RUN_TIMEOUT_S,
                       preexec_fn=_limits)
    except subprocess.TimeoutExpired:
        return {}  # a mutant that hangs: every test counts as not run (failing)
    out: dict[str, str] = {}
    if not junit.is_file():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        file = case.get("file") or ""
        cls = (case.get("classname") or "").rsplit(".", 1)[-1]
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        out[f"{file}::{cls}::{case.get('name')}"] = outcome
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once (the machine is shared: keep it small)")
    args = ap.parse_args()
    import importlib.util

    torch_dir = Path(importlib.util.find_spec("torch").submodule_search_locations[0])
    files = sorted((args.checkout / "test").rglob("test_*.py"))
    rel = {f: f.relative_to(args.checkout).as_posix() for f in files}
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        base = _run(args.checkout, sorted(rel.values()), {}, tmpd / "base.xml")
        print(f"reference run: {sum(v == 'passed' for v in base.values())} passed of {len(base)}", flush=True)
        lines, dropped = [], []
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("")

        def one(mutation: tuple[str, str, str, str]) -> None:
            cid, path, old, new = mutation
            src = (torch_dir / path).read_text(encoding="utf-8")
            if src.count(old) != 1:
                dropped.append(f"{cid}: text found {src.count(old)} times in torch/{path}")
                return
            mutated = src.replace(old, new)
            site = tmpd / cid / "site"
            site.mkdir(parents=True)
            (site / "sitecustomize.py").write_text(HOOK)
            copy = tmpd / cid / Path(path).name
            copy.write_text(mutated)
            module = "torch." + path.removesuffix(".py").replace("/", ".")
            env = {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                   "CRCR_MUTANT_MODULE": module, "CRCR_MUTANT_PATH": str(copy)}
            got = _run(args.checkout, sorted(rel.values()), env, tmpd / cid / "junit.xml")
            failing = sorted(t for t, v in got.items() if v == "failed" and base.get(t) == "passed")
            failing += sorted(t for t, v in base.items() if v == "passed" and t not in got)  # did not even run
            if not failing:
                dropped.append(f"{cid}: no candidate test fails (equivalent or unobserved mutant)")
                print(f"{cid}: no failure", flush=True)
                return
            diff = "".join(difflib.unified_diff(src.splitlines(True), mutated.splitlines(True),
                                                f"a/torch/{path}", f"b/torch/{path}", n=3))
            case = {"id": f"mut-{cid}", "kind": "mutation", "diff": f"diff --git a/torch/{path} b/torch/{path}\n" + diff,
                    "failing_files": sorted({t.split("::", 1)[0] for t in failing}), "failing_tests": failing,
                    "source": f"overlay mutant of torch/{path} (torch 2.13.0); candidate files "
                              f"{', '.join(sorted(rel.values()))} run with and without it"}
            with lock:
                lines.append(case)
                with args.out.open("a", encoding="utf-8") as fh:  # incremental: a cut-short run keeps its cases
                    fh.write(json.dumps(case, sort_keys=True) + "\n")
            print(f"{cid}: {len(failing)} failing", flush=True)

        import threading
        from concurrent.futures import ThreadPoolExecutor

        lock = threading.Lock()
        todo = [m for m in MUTATIONS if not args.only or m[0] in args.only]
        todo.sort(key=lambda m: m[0] in LOOPING)  # they run until the timeout: last
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(one, todo))
    # sorted, so the committed file does not depend on which worker finished first
    args.out.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in sorted(lines, key=lambda c: c["id"])))
    print(f"{len(lines)} cases -> {args.out}; {len(dropped)} left out:")
    for d in dropped:
        print("  " + d)


if __name__ == "__main__":
    main()
