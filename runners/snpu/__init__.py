"""snpu: a simulated NPU registered as a real PyTorch device (PrivateUse1).

Importing this package has no side effects; call ``runners.snpu.install()``.
"""
