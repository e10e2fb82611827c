"""`crcr select upgrade` calls an entry changed only when what its tests see changed: a helper name resolves in
the entry's own module, passing a class default is not a change, an emptied ``x + ()`` is ``x``, a reference
does not inherit what opinfo/refs.py overrides, and an entry added only under a runtime condition the imported
module did not meet is not an added entry."""

from __future__ import annotations

from pathlib import Path

from selector.inventory.opinfo import opinfo_inventory
from selector.inventory.sources import TorchSources
from selector.upgrade import compare


def _torch(root: Path, version: str, files: dict[str, str]) -> Path:
    torch_dir = root / version / "torch"
    for rel, text in files.items():
        path = torch_dir / "testing" / "_internal" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (torch_dir / "version.py").write_text(f"__version__ = '{version}'\n")
    return torch_dir


def _unmet_never_asked() -> set[str]:
    raise AssertionError("asked for the environment's unmet conditions without a conditional entry")


def _diff(tmp_path: Path, old: dict[str, str], new: dict[str, str], device: str | None = "snpu",
          new_runtime_keys: set[str] | None = None, unmet=_unmet_never_asked):
    before = opinfo_inventory(TorchSources(_torch(tmp_path, "2.13.0", old)), device=device, unmet=unmet)
    after = opinfo_inventory(TorchSources(_torch(tmp_path, "2.14.1", new)), new_runtime_keys, device=device,
                             unmet=unmet)
    return compare(before, after)


CMI_HELPERS = '''
def sample_inputs_std_var(op_info, device, dtype, requires_grad, **kwargs):
    return [make_tensor((S, S))]

op_db = [
    ReductionOpInfo('std', sample_inputs_func=sample_inputs_std_var),
]
'''
MASKED = '''
def sample_inputs_std_var(op_info, device, dtype, requires_grad, **kwargs):
    return [make_tensor((S,), mask=True)]

op_db = [
    ReductionOpInfo('masked.std', sample_inputs_func=sample_inputs_std_var),
]
'''


def test_a_helper_name_resolves_in_the_entrys_own_module(tmp_path):
    """_masked.py has its own sample_inputs_std_var: a change to common_methods_invocations' function of the same
    name changes std, not masked.std; a change to _masked.py's changes masked.std only."""
    old = {"common_methods_invocations.py": CMI_HELPERS, "opinfo/definitions/_masked.py": MASKED}
    cmi_changed = {**old, "common_methods_invocations.py": CMI_HELPERS.replace("(S, S)", "(S, S, S)")}
    diff = _diff(tmp_path / "a", old, cmi_changed)
    assert diff.changed == ["std"] and diff.added == [] and diff.removed == []
    masked_changed = {**old, "opinfo/definitions/_masked.py": MASKED.replace("mask=True", "mask=False")}
    assert _diff(tmp_path / "b", old, masked_changed).changed == ["masked.std"]


CORE = '''
from dataclasses import dataclass

@dataclass
class OpInfo:
    name: str
    gradcheck_nondet_tol: float = 0.0
    supports_out: bool = True

class ReductionOpInfo(OpInfo):
    def __init__(self, name, *, supports_multiple_dims=True, **kwargs):
        super().__init__(name, **kwargs)
'''
REDUCE_OLD = '''
op_db = [
    *(OpInfo('index_reduce', variant_test_name=reduction_type, dtypes=all_types())
      for reduction_type in ('mean', 'prod', 'amin', 'amax')),
    OpInfo('addmm', dtypes=all_types()),
    OpInfo('baddbmm', dtypes=all_types()),
    ReductionOpInfo('sum', dtypes=all_types()),
    ReductionOpInfo('prod', dtypes=all_types()),
]
'''
REDUCE_NEW = '''
op_db = [
    *(OpInfo('index_reduce', variant_test_name=reduction_type, dtypes=all_types(),
             gradcheck_nondet_tol=GRADCHECK_NONDET_TOL if reduction_type in ('mean', 'prod') else 0.0)
      for reduction_type in ('mean', 'prod', 'amin', 'amax')),
    OpInfo('addmm', dtypes=all_types(), gradcheck_nondet_tol=0.0, supports_out=True),
    OpInfo('baddbmm', dtypes=all_types(), gradcheck_nondet_tol=1e-3),
    ReductionOpInfo('sum', dtypes=all_types(), supports_multiple_dims=True),
    ReductionOpInfo('prod', dtypes=all_types(), supports_multiple_dims=False),
]
'''


def test_a_keyword_whose_static_value_is_the_class_default_is_no_change(tmp_path):
    """gradcheck_nondet_tol=... if reduction_type in ('mean', 'prod') else 0.0 is the dataclass default for amin and
    amax; addmm passing both defaults literally is unchanged too; a value off the default, or an __init__ keyword
    set off its default, is a change."""
    old = {"common_methods_invocations.py": REDUCE_OLD, "opinfo/core.py": CORE}
    new = {"common_methods_invocations.py": REDUCE_NEW, "opinfo/core.py": CORE}
    diff = _diff(tmp_path, old, new)
    assert diff.changed == ["baddbmm", "index_reduce.mean", "index_reduce.prod", "prod"]


MVL_OLD = '''
def skips_mvlgamma(skip_redundant=False):
    return (DecorateInfo(unittest.skip("Skipped!"), 'TestUnaryUfuncs', 'test_float_domains'),)

op_db = [
    UnaryUfuncInfo('mvlgamma', variant_test_name='mvlgamma_p_1',
                   skips=skips_mvlgamma() + (
                       DecorateInfo(unittest.expectedFailure, 'TestCommon', 'test_out', device_type='mps'),)),
]
'''
MVL_NEW = MVL_OLD.replace(''' + (
                       DecorateInfo(unittest.expectedFailure, 'TestCommon', 'test_out', device_type='mps'),)''', "")


def test_a_sum_emptied_for_the_device_is_its_other_operand(tmp_path):
    """Dropping an mps-only DecorateInfo appended to skips_mvlgamma() changes nothing on snpu or cpu; on mps it
    does."""
    assert MVL_NEW != MVL_OLD
    old, new = {"common_methods_invocations.py": MVL_OLD}, {"common_methods_invocations.py": MVL_NEW}
    assert _diff(tmp_path / "snpu", old, new).changed == []
    assert _diff(tmp_path / "cpu", old, new, device="cpu").changed == []
    assert _diff(tmp_path / "mps", old, new, device="mps").changed == ["mvlgamma.mvlgamma_p_1"]


REFS = '''
def _inherit_constructor_args(name, op, inherited, overrides):
    common_kwargs = {"name": name, "op": op}
    kwargs = inherited.copy()
    if "skips" in kwargs:
        del kwargs["skips"]
    kwargs.update(common_kwargs)
    kwargs.update(overrides)
    kwargs["supports_autograd"] = False
    kwargs["supports_forward_ad"] = False
    return kwargs
'''
REF_OLD = '''
op_db = [
    OpInfo('narrow_copy', supports_forward_ad=False, supports_out=False),
    OpInfo('cat', supports_forward_ad=False, supports_out=False),
]
python_ref_db = [
    PythonRefInfo("_refs.narrow_copy", torch_opinfo_name="narrow_copy"),
    PythonRefInfo("_refs.cat", torch_opinfo_name="cat"),
]
'''
REF_NEW = REF_OLD.replace("OpInfo('narrow_copy', supports_forward_ad=False", "OpInfo('narrow_copy', supports_forward_ad=True"
                          ).replace("OpInfo('cat', supports_forward_ad=False, supports_out=False",
                                    "OpInfo('cat', supports_forward_ad=False, supports_out=True")


def test_a_reference_does_not_inherit_what_inherit_constructor_args_sets_itself(tmp_path):
    """refs.py sets supports_forward_ad to False for every reference: narrow_copy's change is not _refs.narrow_copy's;
    cat's supports_out is inherited, so its change is _refs.cat's too."""
    old = {"common_methods_invocations.py": REF_OLD, "opinfo/refs.py": REFS}
    new = {"common_methods_invocations.py": REF_NEW, "opinfo/refs.py": REFS}
    assert _diff(tmp_path, old, new).changed == ["_refs.cat", "cat", "narrow_copy"]


DSL_OLD = '''
_WITH_LEGACY = False
dsl_ops_by_dsl: dict[str, list[OpInfo]] = {}
for dsl_name in torch.backends.python_native.available_dsls:
    dsl_ops_by_dsl[dsl_name] = []

op_db = [
    OpInfo('topk', dtypes=all_types()),
]
if _WITH_LEGACY:
    op_db.append(OpInfo('legacy_op', dtypes=all_types()))
'''
DSL_NEW = DSL_OLD + '''
if "cutedsl" in dsl_ops_by_dsl:
    dsl_ops_by_dsl["cutedsl"].append(OpInfo('topk', variant_test_name='cutedsl_optimized', dtypes=all_types()))

for ops in dsl_ops_by_dsl.values():
    op_db.extend(ops)
'''


def test_an_entry_added_under_a_runtime_condition_counts_only_where_the_module_holds_it(tmp_path):
    """topk.cutedsl_optimized exists only when the cutedsl DSL is available: against the imported op_db that lacks
    it, it is not added; without an imported op_db (a wheel) it is, so nothing is missed. A condition on a
    module constant is decided statically."""
    old, new = {"common_methods_invocations.py": DSL_OLD}, {"common_methods_invocations.py": DSL_NEW}
    assert _diff(tmp_path / "a", old, new, new_runtime_keys={"topk"}, unmet=set).added == []
    assert _diff(tmp_path / "b", old, new, new_runtime_keys={"topk", "topk.cutedsl_optimized"}, unmet=set).added == [
        "topk.cutedsl_optimized"]
    assert _diff(tmp_path / "c", old, new, unmet=set).added == ["topk.cutedsl_optimized"]
    keys = {t.op for t in opinfo_inventory(TorchSources(_torch(tmp_path / "d", "2.14.1", new))).tests}
    assert keys == {"topk", "topk.cutedsl_optimized"}
    # Where the environment does not meet the condition (read from the installed torch), neither version's entry
    # counts: defined in both and changed, it is not re-evaluated; added in a wheel, it is not added.
    changed = {"common_methods_invocations.py": DSL_NEW.replace("variant_test_name='cutedsl_optimized', dtypes=all_types()",
                                                                "variant_test_name='cutedsl_optimized', dtypes=floating_types()")}
    assert _diff(tmp_path / "e", new, changed, unmet=set).changed == ["topk.cutedsl_optimized"]
    diff = _diff(tmp_path / "f", new, changed, unmet=lambda: {"topk.cutedsl_optimized"})
    assert diff.changed == [] and diff.added == [] and diff.removed == []
    assert _diff(tmp_path / "g", old, new, unmet=lambda: {"topk.cutedsl_optimized"}).added == []
