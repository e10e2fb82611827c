"""The static import graph on a fixture tree (a tiny torch package and test/ folder)."""

from __future__ import annotations

from pathlib import Path

from selector.importgraph import ImportGraph, checkout_imports, module_of, parse_imports, torch_module_graph
from selector.signals.base import Change, Universe
from selector.signals.imports import ImportGraphSignal, changed_modules

TREE = Path(__file__).resolve().parent.parent / "fixtures" / "importgraph"


def _graph() -> ImportGraph:
    return ImportGraph(torch_module_graph(TREE / "torch"), checkout_imports(TREE))


def test_module_names_and_relative_imports_resolve():
    assert module_of("torch/nn/functional.py") == "torch.nn.functional"
    assert module_of("torch/fx/__init__.py") == "torch.fx"
    assert module_of("aten/src/ATen/native/SoftMax.cpp") is None
    mods = torch_module_graph(TREE / "torch")
    assert "torch._refs.core" in mods["torch.nn.functional"]  # from .._refs import core
    assert "torch._utils" in mods["torch._refs.core"]  # inside a module-level try
    assert parse_imports("def f():\n    import torch.fx\n") == set()  # function-level: not an edge
    assert parse_imports("this is not python (") == set()


def test_reach_is_transitive_with_depth():
    g = _graph()
    reach = g.reach("test/nn/test_fn.py")
    assert reach["torch.nn.functional"] == 1
    assert reach["torch._refs.core"] == 2
    assert reach["torch._utils"] == 3
    assert "torch._refs.core" not in g.reach("test/test_lazy.py")  # imported inside a function only
    assert g.reach("test/test_utils_only.py") == {"torch._utils": 1}


def test_signal_prefers_direct_importers_and_ignores_unrelated_files():
    g = _graph()
    u = Universe(durations={f: 10.0 for f in g.tests}, graph=g)
    hits = ImportGraphSignal().score(Change(paths=["torch/_utils.py"]), u)
    assert set(hits) == {"test/nn/test_fn.py", "test/test_utils_only.py"}
    assert hits["test/test_utils_only.py"].score > hits["test/nn/test_fn.py"].score
    assert "through 2 import(s)" in hits["test/nn/test_fn.py"].why
    hits = ImportGraphSignal().score(Change(paths=["torch/_refs/core.py"]), u)
    assert set(hits) == {"test/nn/test_fn.py"}


def test_native_paths_map_to_their_python_module():
    assert changed_modules(["torch/csrc/distributed/c10d/ProcessGroup.cpp"]) == {
        "torch.distributed": "torch/csrc/distributed/c10d/ProcessGroup.cpp"}
    assert changed_modules(["README.md"]) == {}


def test_attribute_chains_and_reexports_reach_the_defining_module(tmp_path):
    from selector.importgraph import parse_usage

    src = ("import torch\nimport torch.nn.utils.rnn as rnn_utils\nfrom torch import nn\n"
           "def test_x():\n    m = torch.nn.Conv2d(1, 1, 1)\n    rnn_utils.pad_sequence([])\n    nn.init.eye_(m)\n"
           "    value = other.torch.nope\n")
    used = parse_usage(src)
    assert {"torch.nn.Conv2d", "torch.nn.utils.rnn.pad_sequence", "torch.nn.init.eye_"} <= used
    assert not any("nope" in u for u in used)
    # a package that re-exports a name (through a star import) makes it a node of its own
    pkg = tmp_path / "torch"
    (pkg / "nn" / "modules").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from torch import nn\n")
    (pkg / "nn" / "__init__.py").write_text("from .modules import *\n")
    (pkg / "nn" / "modules" / "__init__.py").write_text("from .conv import Conv2d\n")
    (pkg / "nn" / "modules" / "conv.py").write_text("import torch\nclass Conv2d: ...\n")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_pack.py").write_text(src)
    mods = torch_module_graph(pkg)
    assert mods["torch.nn.modules.Conv2d"] == {"torch.nn.modules.conv"}
    assert mods["torch.nn.Conv2d"] == {"torch.nn.modules.conv"}
    g = ImportGraph(mods, checkout_imports(tmp_path))
    assert g.reach("test/test_pack.py")["torch.nn.modules.conv"] == 2  # torch.nn.Conv2d -> conv
