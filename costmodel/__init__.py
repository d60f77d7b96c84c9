"""costmodel: serving-cost model for DiffusionGemma-26B-A4B vs Gemma-4-26B-A4B (AR, MTP)."""

__version__ = "0.1.0"

from costmodel import native as _native

_native.install()  # before any hot module is imported: the compiled ones where a current build exists (costmodel/native.py)
