"""costmodel: serving-cost model for DiffusionGemma-26B-A4B vs Gemma-4-26B-A4B (AR, MTP)."""

__version__ = "0.1.0"
