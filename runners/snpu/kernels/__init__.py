"""snpu kernels; importing this package registers them all with ``runners.snpu.dispatch``."""

from runners.snpu.kernels import (  # noqa: F401 - imported for registration
    activations,
    attention,
    data_movement,
    elementwise,
    embedding,
    matmul,
    norms,
    reductions,
    softmax,
    whole,
)
