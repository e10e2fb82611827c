"""``import-graph``: test files whose (transitive) imports reach a changed torch module.

A change to ``torch/nn/functional.py`` reaches every file importing it directly (score
1) or through other modules (1/depth). A module that nearly every file reaches says
little, so each score is scaled by how specific the module is (inverse document
frequency over the universe). C++ sources map to the Python module they back.
"""

from __future__ import annotations

import bisect
import math
import re

from selector.importgraph import module_of
from selector.signals.base import Change, Hit, Signal, Universe

# C++ / non-Python paths -> the Python module whose tests exercise them.
NATIVE_OWNERS: tuple[tuple[str, str], ...] = (
    (r"^torch/csrc/distributed/", "torch.distributed"), (r"^torch/csrc/autograd/", "torch.autograd"),
    (r"^torch/csrc/jit/", "torch.jit"), (r"^torch/csrc/dynamo/", "torch._dynamo"),
    (r"^torch/csrc/inductor/", "torch._inductor"), (r"^torch/csrc/profiler/|^torch/csrc/autograd/profiler",
                                                    "torch.profiler"),
    (r"^torch/csrc/cuda/|^c10/cuda/|^aten/src/ATen/cuda/", "torch.cuda"), (r"^torch/csrc/mps/|/mps/", "torch.mps"),
    (r"^torch/csrc/functorch/|^aten/src/ATen/functorch/", "torch._functorch"),
    (r"^torch/csrc/export/", "torch.export"), (r"^torch/csrc/fx/", "torch.fx"),
    (r"^torch/csrc/api/", "torch.nn"), (r"^torch/csrc/utils/tensor_|^torch/csrc/tensor/", "torch._tensor"),
    (r"^aten/src/ATen/native/sparse/", "torch.sparse"), (r"^aten/src/ATen/native/nested/", "torch.nested"),
    (r"^aten/src/ATen/native/quantized/", "torch.ao.quantization"), (r"^aten/src/ATen/native/mkldnn/", "torch.backends.mkldnn"),
    (r"^aten/src/ATen/native/transformers/", "torch.nn.functional"),
    (r"^torch/csrc/multiprocessing/", "torch.multiprocessing"), (r"^torch/csrc/serialization", "torch.serialization"),
    (r"^torch/csrc/lazy/", "torch._lazy"), (r"^torch/csrc/onnx/", "torch.onnx"),
)
_NATIVE = tuple((re.compile(rx), mod) for rx, mod in NATIVE_OWNERS)


def changed_modules(paths: list[str]) -> dict[str, str]:
    """Changed torch module -> the path it came from."""
    out: dict[str, str] = {}
    for p in paths:
        mod = module_of(p)
        if mod is None:
            mod = next((m for rx, m in _NATIVE if rx.search(p)), None)
        if mod is not None:
            out.setdefault(mod, p)
    return out


class ImportGraphSignal(Signal):
    name = "import-graph"
    weight = 5.0

    def score(self, change: Change, universe: Universe) -> dict[str, Hit]:
        graph = universe.graph
        if graph is None:
            return {}
        mods = changed_modules(change.paths)
        if not mods:
            return {}
        files = universe.files
        inverse: dict[str, dict[str, int]] = {}
        for f in files:
            for m, d in graph.reach(f).items():
                inverse.setdefault(m, {})[f] = d
        n = max(len(files), 2)
        keys = sorted(inverse)  # submodules of a package are one contiguous run: found by bisection
        out: dict[str, Hit] = {}
        for mod, path in sorted(mods.items()):
            # A package's own __init__ is reached by anything in the package: its submodules count too.
            reached: dict[str, int] = dict(inverse.get(mod, {}))
            if mod != "torch":
                prefix = mod + "."
                for m in keys[bisect.bisect_left(keys, prefix):bisect.bisect_left(keys, mod + "/")]:
                    if m.startswith(prefix):
                        for f, d in inverse[m].items():
                            if d < reached.get(f, 99):
                                reached[f] = d
            if not reached:
                continue
            idf = math.log(n / len(reached)) / math.log(n)
            for f, d in sorted(reached.items()):
                s = max(0.05, idf) / d
                if f not in out or s > out[f].score:
                    how = "imports it" if d == 1 else f"reaches it through {d - 1} import(s)"
                    out[f] = Hit(round(min(1.0, s), 4), f"{path} is module {mod}; this file {how}")
        return out
