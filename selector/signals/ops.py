"""``op-touched``: ops whose kernels, schemas, derivatives, refs, decompositions or OpInfo
entries the diff touches (read from hunks, not only paths), mapped to the test files
that exercise ops: the OpInfo-driven files, and the family file of the op's OpInfo list
(``unary_ufuncs`` -> ``test_unary_ufuncs.py``).
"""

from __future__ import annotations

import re

from selector.diffparse import FileDiff
from selector.signals.base import Change, Hit, Signal, Universe

# Files that run every OpInfo of op_db (device-generic ``@ops(op_db)`` suites).
OPINFO_FILES = (
    "test/test_ops.py", "test/test_ops_gradients.py", "test/test_ops_fwd_gradients.py", "test/test_ops_jit.py",
    "test/test_decomp.py", "test/test_meta.py", "test/test_proxy_tensor.py", "test/test_fake_tensor.py",
    "test/test_schema_check.py", "test/functorch/test_ops.py", "test/functorch/test_vmap.py",
    "test/functorch/test_aotdispatch.py", "test/inductor/test_torchinductor_opinfo.py", "test/test_ops_unbacked.py",
)
# OpInfo list (or op-name prefix) -> the file that tests that family in depth.
FAMILY_FILES = {
    "unary_ufuncs": "test/test_unary_ufuncs.py", "binary_ufuncs": "test/test_binary_ufuncs.py",
    "reduction_ops": "test/test_reductions.py", "spectral_funcs": "test/test_spectral_ops.py",
    "foreach_unary_op_db": "test/test_foreach.py", "foreach_binary_op_db": "test/test_foreach.py",
    "foreach_pointwise_op_db": "test/test_foreach.py", "foreach_reduce_op_db": "test/test_foreach.py",
    "foreach_other_op_db": "test/test_foreach.py", "shape_funcs": "test/test_shape_ops.py",
    "python_ref_db": "test/test_ops.py", "sparse_unary_ufuncs": "test/test_sparse.py",
    "sparse_reduction_ops": "test/test_sparse.py", "sparse_csr_unary_ufuncs": "test/test_sparse_csr.py",
    "linalg": "test/test_linalg.py", "fft": "test/test_spectral_ops.py", "nn": "test/test_nn.py",
    "special": "test/test_unary_ufuncs.py", "_masked": "test/test_masked.py", "masked": "test/test_masked.py",
    "sparse": "test/test_sparse.py", "nested": "test/test_nestedtensor.py",
}
_FUNC = re.compile(r"^\s*-\s*(?:func|name):\s*([A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z0-9_]+)?\s*\(")
_OPINFO = re.compile(r"\b\w*(?:OpInfo|Info)\(\s*['\"]([A-Za-z_][\w.]*)['\"]")
_ATEN = re.compile(r"\baten\.([A-Za-z_][A-Za-z0-9_]*)")
_DEF = re.compile(r"\bdef\s+([A-Za-z_][A-Za-z0-9_]*)")
_SAMPLE = re.compile(r"^(?:sample_inputs|reference_inputs|error_inputs)_(\w+?)(?:_tensor|_scalar)?$")
_CPP_FN = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\b")  # any word of a C++ hunk header; op_db filters
_KERNEL_SUFFIXES = ("_out", "_kernel", "_impl", "_cpu", "_cuda", "_stub", "_forward", "_backward", "_template",
                    "_fn", "_symint", "_mps", "_meta", "_decomposition", "_ref")
OP_PATHS = re.compile(r"^(aten/src/ATen/native/|torch/_decomp/|torch/_refs/|torch/_prims|torch/_meta_registrations|"
                      r"torch/testing/_internal/(common_methods_invocations|opinfo/)|tools/autograd/derivatives\.yaml|"
                      r"torch/csrc/autograd/FunctionsManual|torch/nn/functional\.py|torch/functional\.py|"
                      r"torch/_torch_docs\.py|torch/linalg/|torch/fft/|torch/special/)")
MAX_OPS = 200


def _strip(name: str) -> list[str]:
    """``softmax_cpu_out`` -> softmax_cpu_out, softmax_cpu, softmax; ``_foo`` -> foo too."""
    names = [name]
    changed = True
    while changed:
        changed = False
        for suffix in _KERNEL_SUFFIXES:
            cur = names[-1]
            if cur.endswith(suffix) and len(cur) > len(suffix) + 2:
                names.append(cur[: -len(suffix)])
                changed = True
                break
    return names + [n.lstrip("_") for n in names if n.startswith("_") and len(n) > 3]


def touched_ops(diffs: list[FileDiff]) -> dict[str, str]:
    """Candidate op names -> where in the diff they were seen (``path:line``)."""
    found: dict[str, str] = {}

    def add(name: str, where: str) -> None:
        for n in _strip(name):
            found.setdefault(n, where)

    for d in diffs:
        if not OP_PATHS.search(d.path):
            continue
        stem = d.path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        is_cpp = d.path.startswith("aten/") or d.path.startswith("torch/csrc/")
        for h in d.hunks:
            where = f"{d.path}:{h.start}"
            changed = h.added + h.removed
            if d.path.endswith(".yaml"):
                for line in [*changed, h.context]:
                    m = _FUNC.match(line)
                    if m:
                        add(m.group(1), where)
                continue
            for line in [*changed, h.context]:
                for m in _OPINFO.finditer(line):
                    add(m.group(1), where)
                for m in _ATEN.finditer(line):
                    add(m.group(1), where)
            for name in sorted(h.edited_defs) + [m.group(1) for m in _DEF.finditer(h.context)]:
                sm = _SAMPLE.match(name)
                add(sm.group(1) if sm else name, where)
            if is_cpp:
                for m in _CPP_FN.finditer(h.context):
                    add(m.group(1), where)
        if is_cpp and stem:
            add(stem.lower(), d.path)  # SoftMax.cpp -> softmax
    return dict(sorted(found.items())[: MAX_OPS * 4])


class OpsTouched(Signal):
    name = "op-touched"
    weight = 6.0

    def score(self, change: Change, universe: Universe) -> dict[str, Hit]:
        found = touched_ops(change.diffs)
        if not found:
            return {}
        known = universe.op_families
        ops: dict[str, str] = {}
        for name, where in found.items():
            # An op counts only when the installed op_db knows the name (any variant of it).
            for op in sorted(universe.op_names.get(name, ())):
                ops.setdefault(op, where)
        if not ops:
            return {}
        out: dict[str, Hit] = {}
        names = sorted(ops)[:MAX_OPS]
        label = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        for f in OPINFO_FILES:
            if f in universe.durations:
                out[f] = Hit(0.8, f"the diff touches op(s) {label} ({ops[names[0]]}); this file runs every OpInfo")
        for op in names:
            families = set(known.get(op, ()))
            parts = op.split(".")
            if len(parts) > 1:
                families.add(parts[0])
            for fam in sorted(families):
                f = FAMILY_FILES.get(fam)
                if f and f in universe.durations:
                    out[f] = Hit(1.0, f"the diff touches op {op} ({ops[op]}), an OpInfo of {fam}")
        for f, tests in sorted(universe.tests.items()):
            hit_tests = tuple(sorted(t.id for t in tests if t.op and t.op in ops))
            if hit_tests:
                out[f] = Hit(1.0, f"{len(hit_tests)} test(s) of op(s) {label}", hit_tests)
        return out
