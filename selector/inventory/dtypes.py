"""Static dtype expressions: ``torch.float``, ``floating_types_and(torch.half)`` -> names.

Tests' ``@dtypes(...)`` arguments are read from the AST, never evaluated.
"""

from __future__ import annotations

import ast

ALIASES: dict[str, str] = {
    "float": "float32",
    "float32": "float32",
    "double": "float64",
    "float64": "float64",
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "cfloat": "complex64",
    "complex64": "complex64",
    "cdouble": "complex128",
    "complex128": "complex128",
    "chalf": "complex32",
    "complex32": "complex32",
    "long": "int64",
    "int64": "int64",
    "int": "int32",
    "int32": "int32",
    "short": "int16",
    "int16": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
}
# torch.testing._internal.common_dtype helpers (their documented sets)
_FLOATING = ["float32", "float64"]
_COMPLEX = ["complex64", "complex128"]
_INTEGRAL = ["uint8", "int8", "int16", "int32", "int64"]
HELPERS: dict[str, list[str]] = {
    "floating_types": _FLOATING,
    "floating_and_complex_types": _FLOATING + _COMPLEX,
    "complex_types": _COMPLEX,
    "integral_types": _INTEGRAL,
    "all_types": _FLOATING + _INTEGRAL,
    "all_types_and_complex": _FLOATING + _INTEGRAL + _COMPLEX,
    "double_types": ["float64", "complex128"],
    "get_all_dtypes": _FLOATING + _INTEGRAL + _COMPLEX + ["float16", "bfloat16", "bool", "complex32"],
    "get_all_fp_dtypes": ["float16", "bfloat16", *_FLOATING],
    "get_all_math_dtypes": _FLOATING + _INTEGRAL + _COMPLEX + ["float16", "bfloat16"],
    "get_all_complex_dtypes": _COMPLEX,
    "get_all_int_dtypes": _INTEGRAL,
}


def dtype_of(node: ast.AST) -> str | None:
    """``torch.float`` -> ``float32``; anything else -> None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return ALIASES.get(node.attr)
    return None


def dtypes_of(node: ast.AST) -> list[str] | None:
    """Names of the dtypes an expression denotes, or None when it is not static."""
    single = dtype_of(node)
    if single is not None:
        return [single]
    if isinstance(node, ast.Starred):
        return dtypes_of(node.value)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        out: list[str] = []
        for elt in node.elts:
            sub = dtypes_of(elt)
            if sub is None:
                return None
            out.extend(sub)
        return out
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        base_name = name.removesuffix("_and") if name.endswith("_and") else name
        if base_name in HELPERS:
            out = list(HELPERS[base_name])
            for arg in node.args:
                sub = dtypes_of(arg)
                if sub is None:
                    return None
                out.extend(sub)
            return list(dict.fromkeys(out))
    return None


def dtype_variants(dec: ast.Call) -> list[list[str]] | None:
    """The instantiations a ``@dtypes(...)`` decorator asks for: each a list (tuples give several)."""
    variants: list[list[str]] = []
    for arg in dec.args:
        if isinstance(arg, ast.Tuple | ast.List) and all(dtype_of(e) for e in arg.elts):
            variants.append([dtype_of(e) or "" for e in arg.elts])
            continue
        sub = dtypes_of(arg)
        if sub is None:
            return None
        variants.extend([d] for d in sub)
    return variants
