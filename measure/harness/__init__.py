"""The in-process GPU harness behind `costmodel measure` (no --endpoint): transformers'
DiffusionGemma, Gemma-4 (AR) and Gemma-4 + assistant (MTP) models, at full size with random weights
or from a checkpoint, with CUDA-event pass timers, the `accept_canvas` commit hook, commit-schedule
replay, NVML telemetry, and a resumable run directory (costmodel.schemas.rundir).

Modules: `options` (CLI options, torch-free), `config` (validated settings, torch-free), `build`
(model construction), `timing` (pass timers, roofline annotation), `hook` (DiffusionGemma
instrumentation), `diffusion`, `causal` (AR and MTP loops), `replay`, `telemetry`, `summary`,
`campaign` (units, run directory, progress).
"""
