"""crcr: cross-repository CI for PyTorch out-of-tree hardware backends.

The ``crcr`` package is the shared kernel: contracts (pydantic models of every file
and wire format), settings, storage, the GitHub adapter, and the CLI that composes
the components (``relay``, ``selector``, ``runners``, ``triage``).
"""

__version__ = "0.1.0"
