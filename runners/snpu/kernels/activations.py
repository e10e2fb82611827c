"""Activation functions and their backward ops: elementwise kernels on the vector unit.

They share the tiled elementwise executor; the number of passes per stick models how
much special-function work each needs (gelu's erf or tanh, silu's sigmoid).
"""

from __future__ import annotations

from typing import Any

from runners.snpu.dispatch import register
from runners.snpu.kernels.elementwise import elementwise

# relu and threshold are elementwise.SIMPLE (registered there)
CHEAP = (
    "hardtanh",
    "hardtanh_",
    "leaky_relu",
    "leaky_relu_",
    "leaky_relu_backward",
    "hardsigmoid",
    "hardsigmoid_",
    "hardsigmoid_backward",
    "hardswish",
    "hardswish_",
    "hardswish_backward",
    "hardshrink",
    "hardshrink_backward",
    "softshrink",
    "softshrink_backward",
    "relu6",
    "prelu",
    "_prelu_kernel",
)

SPECIAL = (
    "gelu",
    "gelu_",
    "gelu_backward",
    "silu",
    "silu_",
    "silu_backward",
    "mish",
    "mish_",
    "mish_backward",
    "elu",
    "elu_",
    "elu_backward",
    "celu",
    "celu_",
    "selu",
    "selu_",
    "softplus",
    "softplus_backward",
    "tanhshrink",
)


@register(*CHEAP, category="activation", execution="tiled")
def cheap(func: Any, args: tuple, kwargs: dict) -> Any:
    return elementwise(func, args, kwargs, passes=1)


@register(*SPECIAL, category="activation", execution="tiled")
def special(func: Any, args: tuple, kwargs: dict) -> Any:
    return elementwise(func, args, kwargs, passes=4)
