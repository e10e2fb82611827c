"""Rules: deterministic, explainable classification. Each rule is a small named class.

A rule looks at one inventory test and either decides it (mode + reason, the rule's
name in brackets at the start of the reason) or passes. The first rule that decides
wins, in the order of :data:`DEFAULT_RULES`: reasons that block a test (upstream
disabled, wrong device, missing feature or dtype, missing op) come before the one
rule that says ``run``. What no rule decides goes to the agent.

A rule may also propose a pattern over the file-relative id that covers every test
sharing its decision (``TestFooPRIVATEUSE1::.*_float64``): plan files use it to say
one thing once. The plan writer verifies each pattern and adds exact exceptions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from crcr.contracts.inventory import InventoryTest
from selector.capabilities import Capabilities
from selector.disabled import DisabledTests
from selector.plaintext import plain

RULES_VERSION = "8"


@dataclass(frozen=True)
class RuleDecision:
    mode: str
    reason: str
    rule: str
    pattern: str | None = None
    evidence: dict[str, str] | None = None


@dataclass
class RuleContext:
    caps: Capabilities
    disabled: DisabledTests | None = None
    # Whether the test's dtype reaches a tensor (True), never does (False: the body never reads its
    # ``dtype`` argument, or only compares it), or cannot be told (None: no source, no such argument).
    dtype_reaches: Callable[[InventoryTest], bool | None] | None = None
    # True while choosing the tests to trace (``crcr select plan`` before the CPU traces exist): a rule that
    # would leave a test to its trace does so already
    trace_pending: bool = False


def _cls_prefix(test: InventoryTest) -> str:
    return re.escape(test.cls) + "::" if test.cls else ""


class Rule:
    """One named rule; subclasses implement :meth:`decide`."""

    name: ClassVar[str] = "rule"

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:  # pragma: no cover
        raise NotImplementedError

    def _d(self, mode: str, why: str, pattern: str | None = None, evidence: dict[str, str] | None = None) -> RuleDecision:
        return RuleDecision(mode, f"[{self.name}] {why}", self.name, pattern, evidence)


class UpstreamDisabled(Rule):
    """Tests PyTorch itself disables on Linux, with the upstream issue."""

    name = "upstream-disabled"

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:
        if ctx.disabled is None:
            return None
        entry = ctx.disabled.lookup(test.cls, test.method)
        if entry is None:
            return None
        where = ", ".join(entry.platforms) or "all platforms"
        return self._d(
            "skip",
            f"upstream disables this test on {where}: pytorch/pytorch#{entry.issue} ({entry.url})",
            evidence={"issue": entry.url, "upstream_key": entry.upstream_key},
        )


_ONLY_DEVICE = re.compile(r"^(?:only(CUDA|CPU|MPS|XPU|HPU|Meta|CUDAAndPRIVATEUSE1))$")
_ONLY_ON = re.compile(r"^onlyOn\((.*)\)$")
_DEVICE_COUNT = re.compile(r"^deviceCountAtLeast\((\d+)\)$")
# onlyNativeDeviceTypes(And) is no restriction here: torch 2.13's NATIVE_DEVICES names the PrivateUse1 backend
# (snpu's testing hook adds its renamed name where torch.testing was imported before the device existed)
_EXPECTED_FAIL = re.compile(r"^expectedFailure(PRIVATEUSE1|PrivateUse1)\b")
_SKIP_OWN = re.compile(r"^skip(PRIVATEUSE1|PrivateUse1)(If)?\b")


class DeviceRestriction(Rule):
    """Decorators that restrict a test to other devices (onlyCUDA, onlyOn, deviceCountAtLeast...)."""

    name = "device-restriction"

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:
        scope = f"{_cls_prefix(test)}{re.escape(test.template)}_.*" if test.template and test.device else None
        for dec in test.decorators:
            m = _ONLY_DEVICE.match(dec)
            if m and m.group(1) != "CUDAAndPRIVATEUSE1":
                return self._d("skip", f"@{dec} restricts the test to {m.group(1).lower()}", scope)
            m = _ONLY_ON.match(dec)
            if m and ctx.caps.device not in m.group(1) and "privateuse1" not in m.group(1).lower():
                return self._d("skip", f"@{dec} does not include {ctx.caps.device}", scope)
            m = _DEVICE_COUNT.match(dec)
            have = int(ctx.caps.limits.get("device_count", 1))
            if m and int(m.group(1)) > have:
                return self._d("skip", f"@{dec} needs {m.group(1)} devices; {ctx.caps.device} exposes {have}", scope)
            if _SKIP_OWN.match(dec) and "If" not in dec.split("(")[0]:
                return self._d("skip", f"@{dec} skips it on PrivateUse1 upstream", scope)
            if _EXPECTED_FAIL.match(dec):
                return self._d("xfail", f"@{dec}: upstream expects it to fail on PrivateUse1", scope)
        return None


class CudaOnlyApi(Rule):
    """Tests that call CUDA-only APIs (torch.cuda.*, CUDA graphs, cudnn) without a device restriction."""

    name = "cuda-only-api"

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:
        if "cuda_api" in test.features and not ctx.caps.feature("cuda_api"):
            return self._d("skip", f"the test calls CUDA-only APIs (torch.cuda, cudnn or CUDA graphs), which {ctx.caps.device} lacks")
        return None


class FeatureNeeds(Rule):
    """Features the test needs that the capability file says the backend lacks."""

    name = "feature-needs"
    CHECKED = ("distributed", "sparse", "quantized", "compile", "jit")
    # tensor kinds: a host test (not instantiated per device type) builds them on the CPU, where they exist; the
    # feature word may also come from its name alone (``test_sparse_only_works_on_2d_inputs`` is about the dense
    # initializer ``nn.init.sparse_``)
    TENSOR_KINDS = ("sparse", "quantized")

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:
        for feat in self.CHECKED:
            if feat in self.TENSOR_KINDS and not test.per_device:
                continue
            if feat in test.features and not ctx.caps.feature(feat):
                scope = f"{_cls_prefix(test)}{re.escape(test.template)}_.*" if test.template and test.device else None
                if feat == "jit" and ctx.caps.feature("jit_script"):
                    # TorchScript scripting runs (the interpreter dispatches to the device like eager); tracing
                    # may not (features.jit_trace): what the body really does tells, where its CPU twin is traced
                    if ctx.caps.feature("jit_trace"):
                        continue
                    if trace_wanted(test) and (ctx.trace_pending or traced_instead(test, ctx.caps)):
                        continue
                    return self._d("skip", f"uses TorchScript, and {ctx.caps.device} scripts (features.jit_script) "
                                   "but does not trace (features.jit_trace: false); no CPU trace of this test tells "
                                   "which it uses", scope)
                return self._d("skip", f"needs {feat}, which {ctx.caps.device}'s capability file marks unsupported", scope)
        return None


class DtypeSupport(Rule):
    """Dtypes the device has no units for (snpu: float64, complex)."""

    name = "dtype-support"

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:
        caps = ctx.caps
        if not test.dtype or not caps.dtypes:
            return None
        parts = [test.dtype] if _is_dtype(test.dtype) else test.dtype.split("_")
        for d in parts:
            if not _is_dtype(d) or d in caps.dtypes:
                continue
            pattern = f"{_cls_prefix(test)}.*_{re.escape(d)}" if test.method.endswith(f"_{d}") else None
            if d in caps.indexing_dtypes:
                # Integer and bool tensors are held natively; whether an op computes in them is
                # the op's question (op-support, the sweep, or the logs), not the dtype's.
                continue
            if caps.refused_dtypes and d not in caps.refused_dtypes:
                # neither held nor refused (snpu: uint16/32/64): what the op does with it is the
                # probes' and op rules' question, as for the indexing dtypes
                continue
            if ctx.dtype_reaches is not None and ctx.dtype_reaches(test) is False:
                # the body never builds a tensor of its dtype (it ignores or only compares the
                # argument): what it calls decides, not the dtype in its name
                return None
            return self._d("skip", f"{caps.device} does not support dtype {d}", pattern)
        return None


def _is_dtype(token: str) -> bool:
    return bool(re.fullmatch(r"(float|bfloat|complex|int|uint)\d+|bool|float8\w*", token))


_DTYPE_CLAIMS = re.compile(r"^test_dtypes$")
_PYTHON_REF = re.compile(r"^test_python_ref\w*$")


class DtypeClaims(Rule):
    """``test_dtypes`` compares the dtypes an OpInfo claims for the device type with the dtypes
    that really work there: it passes only where the capability file's dtypes for the op equal
    the claimed ones, whatever kernels the backend has."""

    name = "dtype-claims"

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:
        if not test.template or not _DTYPE_CLAIMS.match(test.template) or not test.op or test.op_dtypes is None:
            return None
        caps = ctx.caps
        claimed = set(test.op_dtypes)
        considered = claimed | caps.dtypes | caps.refused_dtypes
        works = {d for d in considered if _dtype_works(caps, test.op, d)}
        if works == claimed:
            return self._d("run", f"{caps.device}'s dtypes for op {test.op} equal the OpInfo's claimed dtypes "
                           f"({', '.join(sorted(claimed))})")
        missing, extra = sorted(claimed - works), sorted(works - claimed)
        diff = "; ".join(x for x in (
            f"claimed but not working on {caps.device}: {', '.join(missing)}" if missing else "",
            f"working but not claimed: {', '.join(extra)}" if extra else "") if x)
        return self._d("xfail", f"test_dtypes compares the OpInfo's claimed dtypes for op {test.op} with what "
                       f"{caps.device} runs, and they differ ({diff})", _template_pattern(test))


def _dtype_works(caps: Capabilities, op: str, dtype: str) -> bool:
    if dtype in caps.refused_dtypes or (caps.dtypes and dtype not in caps.dtypes):
        return False
    if dtype in caps.opinfo_by_dtype:
        return op in caps.opinfo_by_dtype[dtype]
    return caps.supports_op(op)


class PythonRefs(Rule):
    """``_refs`` entries and ``test_python_ref*`` tests run torch's Python references, which
    decompose into ``prims`` ops: they need the backend to register ``prims::*`` kernels."""

    name = "python-refs"

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:
        is_ref = bool(test.op and test.op.startswith("_refs.")) or bool(test.template and _PYTHON_REF.match(test.template))
        if not is_ref or (test.template and _DTYPE_CLAIMS.match(test.template)):
            return None  # test_dtypes compares claimed dtypes whatever the entry is: dtype-claims decides
        # Measured and dropped: deciding the torch-fallback template, or plain templates over _refs
        # entries, by the torch op's kernel lowered accuracy (test_ops.py 0.871 -> 0.863; unary
        # 0.829 -> 0.741, binary 0.707 -> 0.659): in eager, references reach prims often enough.
        prims = sorted(a for a in ctx.caps.aten_ops if a.startswith("prims::"))
        if prims or ctx.caps.feature("prims"):
            return None  # prims are there (listed, or `features: {prims: true}`): the op's own support decides
        what = f"the Python reference {test.op}" if test.op and test.op.startswith("_refs.") else f"{test.template}"
        return self._d("skip", f"{what} runs through prims::* ops, and {ctx.caps.device} registers no prims kernel "
                       "(capability file: no prims:: in aten_ops, no features.prims)", _template_pattern(test))


def _template_pattern(test: InventoryTest) -> str | None:
    if not (test.template and test.device and test.method.startswith(test.template + "_")):
        return None
    return f"{_cls_prefix(test)}{re.escape(test.template)}_.*"


# Template families: what a test template characteristically checks beyond "the op's samples run"
# (runners' template probes run each family's check per OpInfo entry and dtype). First match wins;
# any other OpInfo template is the plain "samples" family.
TEMPLATE_FAMILIES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("dtypes", re.compile(r"^test_dtypes$"), "which dtypes work, forward and backward, against the OpInfo's claim"),
    ("ref_fallback", re.compile(r"^test_python_ref_torch_fallback$"),
     "the Python reference on the device against the torch op, torch calls kept"),
    ("python_ref", re.compile(r"^test_python_ref(_.*)?$"),
     "the Python reference in strict refs mode (prims) on the device against the torch op"),
    ("out", re.compile(r"(^|_)out(_|$)"),
     "out= semantics: correct values into NaN-filled and noncontiguous outs, resize warnings, wrong device "
     "and unsafe casts refused"),
    ("python_scalar", re.compile(r"python_scalar|(^|_)scalars?(_|$)"), "a Python number as the other operand"),
    ("noncontiguous", re.compile(r"contig|strided|transpos"), "the op on noncontiguous inputs against contiguous ones"),
    ("variants", re.compile(r"variant_consistency|(^|_)variants?(_|$)"),
     "method, in-place and operator variants against the function"),
    ("grad", re.compile(r"grad|backward|(^|_)ad(_|$)"), "a backward through the op's output"),
)
_FAMILY_TEXT = {name: text for name, _, text in TEMPLATE_FAMILIES} | {
    "samples": "the op's samples on the device against the CPU",
    "attrs": "the OpInfo attributes the template reads exist on this torch's entry"}


# Templates over the unary ufunc list call ``op(t)`` on lone tensors, not on the OpInfo's samples.
UNARY_FAMILIES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("unary_domain", re.compile(r"domain"), "op(t) just outside the OpInfo's domain gives NaN"),
    ("unary_variants", re.compile(r"variant"), "function, method, in-place and TorchScript variants of op(t)"),
    ("unary_noncontiguous", re.compile(r"contig|strided|transpos"), "op(t) on strided views against op(t) sliced"),
    ("unary_values", re.compile(r""), "op(t) on ordinary and extremal values against the CPU, with the OpInfo's "
     "value flags"),
)
_UNARY_OPS = re.compile(r"^ops\(\(?\s*(?:_fn for _fn in )?unary_ufuncs\b")
_FAMILY_TEXT |= {name: text for name, _, text in UNARY_FAMILIES}


def template_family(test: InventoryTest) -> str | None:
    """The probe family of an OpInfo test's template (None for tests without an op or template)."""
    if not test.op or not test.template or "module" in test.features:
        return None
    families = UNARY_FAMILIES if any(_UNARY_OPS.match(d) for d in test.decorators) else TEMPLATE_FAMILIES
    for name, rx, _ in families:
        if rx.search(test.template):
            return name
    return "samples"


def trace_wanted(test: InventoryTest) -> bool:
    """An OpInfo test whose template has no characteristic check (the generic ``samples`` family): the op's
    samples say little of what its body does (``op(torch.empty(1, 0))`` inside ``assertRaisesRegex`` is an
    argument check, not the op's kernel), so its CPU twin is traced like a plain device test. So is a ModuleInfo
    test (``@modules``): the capability file says whether the module's functional op has a kernel, not what the
    body does with the module (a template written for another torch version fails before it builds one)."""
    if not (test.device and test.cls):
        return False
    return template_family(test) == "samples" or ("module" in test.features and bool(test.op))


def traced_instead(test: InventoryTest, caps: Capabilities) -> bool:
    """A generic OpInfo test whose CPU twin ran to an end (passed or failed): the trace decides, not the op's
    samples probe or its kernel list."""
    traces = caps.cpu_traces
    trace = traces.get(test.id) if traces else None
    return trace is not None and trace.outcome in ("passed", "failed") and trace_wanted(test)


def probe_request(test: InventoryTest) -> tuple[str, str, str | None] | None:
    """The ``(family, op, dtype)`` probe this test is planned from (dtype None: the probe picks float32)."""
    family = template_family(test)
    if family is None or test.op is None:
        return None
    dtype = None if family == "dtypes" else (test.dtype if test.dtype and _is_dtype(test.dtype) else None)
    return family, test.op, dtype


def probe_key(family: str, op: str, dtype: str | None) -> str:
    return f"{family}|{op}|{dtype or '-'}"


def reads_key(test: InventoryTest) -> str:
    return f"{test.file}::{test.template}"


_REFUSAL = re.compile(r"NotImplementedError|UnsupportedOp|SnpuDtypeError|DtypeError|not implemented", re.I)


class TemplateProbe(Rule):
    """Plans an OpInfo test from the probe of its template family: the family's characteristic check
    (out=, noncontiguous inputs, Python scalars, references, gradients, dtype claims, samples) run on the
    device once per op and dtype while planning. A refusal is skip, any other failure xfail."""

    name = "template-probe"

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:
        req = probe_request(test)
        if req is None or not ctx.caps.template_probes:
            return None
        if traced_instead(test, ctx.caps):
            return None  # what its CPU twin really called decides (the agent reads the trace)
        family, op, dtype = req
        reads = ctx.caps.template_reads.get(reads_key(test))
        if reads and ctx.caps.template_probes.get(probe_key("attrs", op, reads)):
            return self._d("xfail", f"{ctx.caps.template_probes[probe_key('attrs', op, reads)][:240]} (the "
                           "template was written for another torch version)",
                           f"{_cls_prefix(test)}{re.escape(test.template or '')}_.*_{re.escape(op.replace('.', '_'))}_"
                           f"{re.escape(test.device or '')}(_.*)?" if test.device else None)
        k = probe_key(family, op, dtype)
        if k not in ctx.caps.template_probes:
            return None
        error = ctx.caps.template_probes[k]
        what = f"the {family} probe ({_FAMILY_TEXT[family]}) of op {op}"
        at = f" at {dtype}" if dtype else (" at float32" if family != "dtypes" else "")
        scope = f"{_cls_prefix(test)}{re.escape(test.template or '')}_{re.escape(op.replace('.', '_'))}_" \
                f"{re.escape(test.device or '')}(_.*)?" if test.device else None
        if error is None:
            return self._d("run", f"{what} passed on {ctx.caps.device} at the test's dtype", scope)
        mode = "skip" if _REFUSAL.search(error) else "xfail"
        return self._d(mode, f"{what} failed on {ctx.caps.device}{at}: {plain(error)[:200]}",
                       evidence={"probe": k, "error": plain(error)[:300]})


class OpSupport(Rule):
    """OpInfo tests of ops the backend registers no kernel for."""

    name = "op-support"

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:
        if not test.op or "module" in test.features or ctx.caps.supports_op(test.op, test.dtype):
            return None
        if traced_instead(test, ctx.caps):
            return None
        failure = ctx.caps.sweep_failure(test.op, test.dtype)
        if failure:
            first = failure.strip().splitlines()[0][:160] if failure.strip() else "failed"
            # the sweep ran this op's samples at this dtype: name what it saw
            op_pat = _op_pattern(test)
            pattern = f"{op_pat[: -len('(_.*)?')]}_{re.escape(test.dtype)}" if op_pat and test.dtype else None
            return self._d("skip", f"{ctx.caps.device}'s capability sweep ran op {test.op} at {test.dtype} and it "
                           f"failed: {first}", pattern)
        return self._d(
            "skip",
            f"{ctx.caps.device} has no kernel for op {test.op} (not in its capability file); running it would only "
            "raise NotImplementedError",
            _op_pattern(test),
        )


class OpSupported(Rule):
    """OpInfo tests whose op has a kernel and nothing above blocks them: run."""

    name = "op-supported"

    def decide(self, test: InventoryTest, ctx: RuleContext) -> RuleDecision | None:
        # ModuleInfo tests name a module, not an op: whether it runs is the agent's reading.
        if not test.op or "module" in test.features or not ctx.caps.supports_op(test.op, test.dtype):
            return None
        if traced_instead(test, ctx.caps):
            return None
        return self._d("run", f"{ctx.caps.device} has a kernel for op {test.op} and supports the test's dtype", _op_pattern(test))


def _op_pattern(test: InventoryTest) -> str | None:
    if not (test.device and test.op):
        return None
    # OpInfo's formatted name (dots as underscores) sits right before the device in the method name.
    token = f"_{test.op.replace('.', '_')}_{test.device}"
    if token not in f"_{test.method}":
        return None
    return f"{_cls_prefix(test)}.*{re.escape(token)}(_.*)?"


DEFAULT_RULES: tuple[Rule, ...] = (
    UpstreamDisabled(),
    DeviceRestriction(),
    CudaOnlyApi(),
    FeatureNeeds(),
    PythonRefs(),
    DtypeSupport(),
    TemplateProbe(),
    DtypeClaims(),
    OpSupport(),
    OpSupported(),
)


def _swept(req: tuple[str, str, str | None], caps: Capabilities) -> bool:
    """A samples probe the capability sweep already answered (same check: the op's samples against the CPU)."""
    family, op, dtype = req
    d = dtype or "float32"
    return family == "samples" and d in caps.opinfo_by_dtype and (
        op in caps.opinfo_by_dtype[d] or op in caps.opinfo_failures.get(d, {}))


def probe_requests(tests: list[InventoryTest], ctx: RuleContext,
                   reads: dict[str, str] | None = None) -> list[tuple[str, str, str | None]]:
    """The template probes a plan of ``tests`` needs: one per (family, op, dtype) of the tests that no
    rule before ``template-probe`` decides (a disabled, device-restricted or refused-dtype test needs none),
    and an ``attrs`` probe per (op, attributes its template reads) where ``reads`` names them."""
    cut = next(i for i, r in enumerate(DEFAULT_RULES) if isinstance(r, TemplateProbe))
    wanted: dict[tuple[str, str, str | None], None] = {}
    for test in tests:
        req = probe_request(test)
        if req is None or classify(test, ctx, DEFAULT_RULES[:cut]) is not None:
            continue
        names = (reads or {}).get(reads_key(test))
        if names:
            wanted.setdefault(("attrs", req[1], names), None)
        if not _swept(req, ctx.caps):
            wanted.setdefault(req, None)
    return list(wanted)


def classify(test: InventoryTest, ctx: RuleContext, rules: tuple[Rule, ...] = DEFAULT_RULES) -> RuleDecision | None:
    """The first rule's decision, or None when no rule decides (the agent's turn)."""
    for rule in rules:
        decision = rule.decide(test, ctx)
        if decision is not None:
            return decision
    return None
