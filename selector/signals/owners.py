"""Which torch modules an upstream test file exercises when its source is not at hand.

PyTorch names test folders and files after what they test (``test/distributed/`` ->
``torch.distributed``, ``test_linalg.py`` -> ``torch.linalg``). This table states
that convention once; the import graph uses it as the file's imports wherever no
checkout gives the real ones. Every test imports ``torch.testing._internal.common_utils``.
"""

from __future__ import annotations

import re

# (regex over the path under test/, modules); every matching row applies.
OWNERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"distributed/_tensor/|distributed/tensor/", ("torch.distributed.tensor",)),
    (r"distributed/fsdp/|distributed/_composable/fsdp", ("torch.distributed.fsdp", "torch.distributed._composable")),
    (r"distributed/checkpoint", ("torch.distributed.checkpoint",)),
    (r"distributed/pipelining", ("torch.distributed.pipelining",)),
    (r"distributed/rpc|distributed/algorithms", ("torch.distributed.rpc", "torch.distributed.algorithms")),
    (r"distributed/elastic|distributed/launcher", ("torch.distributed.elastic", "torch.distributed.launcher", "torch.distributed.run")),
    (r"distributed/", ("torch.distributed", "torch.distributed.distributed_c10d", "torch.nn.parallel",
                       "torch.testing._internal.common_distributed")),
    (r"inductor/", ("torch._inductor", "torch._inductor.compile_fx", "torch._inductor.lowering",
                    "torch._inductor.graph", "torch._inductor.scheduler", "torch._dynamo",
                    "torch.testing._internal.inductor_utils")),
    (r"inductor/test_torchinductor_opinfo", ("torch.testing._internal.common_methods_invocations",)),
    (r"dynamo/|test_dynamic_shapes", ("torch._dynamo", "torch._dynamo.symbolic_convert", "torch._dynamo.variables",
                                     "torch._dynamo.eval_frame", "torch._dynamo.test_case")),
    (r"cpython/", ("torch._dynamo", "torch._dynamo.symbolic_convert", "torch._dynamo.variables")),
    (r"python_native/", ("torch._native",)),
    (r"benchmark_utils/", ("torch.utils.benchmark",)),
    (r"backends/xeon", ("torch.backends.xeon",)),
    (r"export/|test_model_exports_to_core_aten", ("torch.export", "torch._export", "torch.export.exported_program",
                                                  "torch.export._trace")),
    (r"functorch/", ("torch._functorch", "torch.func", "torch._functorch.aot_autograd", "torch._functorch.vmap",
                     "torch._functorch.eager_transforms")),
    (r"functorch/test_ops|functorch/test_vmap", ("torch.testing._internal.common_methods_invocations",)),
    (r"profiler/|test_flop_counter|test_itt", ("torch.profiler", "torch.autograd.profiler", "torch.utils.flop_counter")),
    (r"(^|/)nn/|test_nn\b|test_modules|test_stateless|test_expanded_weights|test_native_mha|test_transformers|test_varlen",
     ("torch.nn", "torch.nn.functional", "torch.nn.modules", "torch.testing._internal.common_nn",
      "torch.testing._internal.common_modules")),
    (r"test_pruning_op|nn/test_pruning", ("torch.nn.utils.prune",)),
    (r"higher_order_ops/|test_hop_infra", ("torch._higher_order_ops",)),
    (r"torch_np/", ("torch._numpy",)),
    (r"optim/|test_optim|test_functional_optim", ("torch.optim", "torch.testing._internal.common_optimizers")),
    (r"distributions/", ("torch.distributions",)),
    (r"cpp_extensions/|test_cpp_extensions|test_extension_utils", ("torch.utils.cpp_extension",)),
    (r"custom_operator/|test_custom_ops|test_opaque_obj", ("torch.library", "torch._library", "torch._custom_op")),
    (r"lazy/", ("torch._lazy",)),
    (r"test_fx", ("torch.fx", "torch.fx.experimental", "torch.fx.passes")),
    (r"test_jit|test_tensorexpr|test_ops_jit|test_mobile|test_bundled|test_metal|test_vulkan|test_xnnpack",
     ("torch.jit", "torch.testing._internal.jit_utils")),
    (r"test_ops\b|test_ops_gradients|test_ops_fwd_gradients|test_ops_jit|test_ops_unbacked|test_decomp|test_meta\b|"
     r"test_proxy_tensor|test_fake_tensor|test_schema_check|test_unary_ufuncs|test_binary_ufuncs|test_reductions|"
     r"test_foreach|test_masked\b|test_linalg|test_spectral_ops|test_sparse|test_prims|test_python_dispatch|test_view_ops",
     ("torch.testing._internal.common_methods_invocations", "torch.testing._internal.opinfo.core",
      "torch.testing._internal.common_device_type")),
    (r"test_decomp|test_prims|test_ops\b|test_meta\b", ("torch._decomp", "torch._refs", "torch._prims",
                                                       "torch._meta_registrations", "torch._prims_common")),
    (r"test_proxy_tensor|test_dynamic_spec_make_fx|test_functionalization", ("torch.fx.experimental.proxy_tensor",
                                                                              "torch._subclasses")),
    (r"test_fake_tensor|test_subclass|test_python_dispatch|test_dispatch", ("torch._subclasses", "torch.utils._python_dispatch")),
    (r"test_autograd|test_ops_gradients|test_ops_fwd_gradients", ("torch.autograd", "torch.autograd.gradcheck",
                                                                  "torch.autograd.function", "torch.autograd.forward_ad")),
    (r"test_linalg|test_matmul|test_bmm|test_scaled_matmul", ("torch.linalg", "torch._linalg_utils")),
    (r"test_spectral_ops", ("torch.fft",)),
    (r"test_sparse", ("torch.sparse",)),
    (r"test_nestedtensor", ("torch.nested",)),
    (r"test_masked", ("torch.masked",)),
    (r"test_cuda|test_jiterator|test_triton", ("torch.cuda",)),
    (r"test_mps", ("torch.mps", "torch.backends.mps")),
    (r"test_mkldnn|test_openmp|test_mkl", ("torch.backends.mkldnn", "torch.utils.mkldnn")),
    (r"test_dataloader|test_datapipe", ("torch.utils.data",)),
    (r"test_serialization|test_show_pickle|test_content_store", ("torch.serialization", "torch._weights_only_unpickler")),
    (r"test_package", ("torch.package",)),
    (r"test_hub", ("torch.hub",)),
    (r"test_tensorboard", ("torch.utils.tensorboard",)),
    (r"test_pytree", ("torch.utils._pytree",)),
    (r"test_overrides|test_public_bindings", ("torch.overrides",)),
    (r"test_sympy_utils", ("torch.utils._sympy",)),
    (r"test_multiprocessing", ("torch.multiprocessing",)),
    (r"test_autocast|test_jit_autocast", ("torch.amp", "torch.autocast_mode")),
    (r"test_quantization|quantization/|test_ao_sparsity|ao/", ("torch.ao", "torch.ao.quantization", "torch.ao.nn")),
    (r"onnx/", ("torch.onnx",)),
    (r"test_torch\b|test_tensor_creation_ops|test_indexing|test_shape_ops|test_sort_and_select|test_type_promotion|"
     r"test_scatter_gather|test_as_strided|test_complex|test_view_ops|test_type_info|test_numpy_interop|test_dlpack",
     ("torch._tensor", "torch.functional", "torch._torch_docs", "torch._tensor_str", "torch._utils")),
    (r"test_utils\b|test_utils_", ("torch.utils", "torch.utils.checkpoint")),
    (r"test_accelerator|test_privateuseone|test_rename_privateuse1|test_autoload", ("torch.accelerator", "torch.utils.backend_registration")),
    (r"test_testing", ("torch.testing", "torch.testing._comparison")),
)
COMMON = ("torch.testing._internal.common_utils",)
_COMPILED = tuple((re.compile(rx), mods) for rx, mods in OWNERS)


def owner_modules(test_file: str) -> set[str]:
    """The torch modules a test file exercises by PyTorch's naming convention (plus common_utils)."""
    rel = test_file.removeprefix("test/").removesuffix(".py")
    out = set(COMMON)
    for rx, mods in _COMPILED:
        if rx.search(rel):
            out.update(mods)
    return out
