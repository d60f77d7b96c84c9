"""Measurement: GPU harness (transformers), endpoint load generator, run directories, analysis."""
