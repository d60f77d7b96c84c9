"""The Triton kernels of the operator campaign and their tuning tables, in one module family:
`basic` (fused MoE GEMMs, flash attention for head_dim 512, norms, router top-k, row samplers),
`fused` (the fused and small-batch kernels: GEMVs with epilogues, two-launch MoE GEMV, fused norm
groups, one-launch router, split samplers, the flash combine), `sampler_parts` (jit helpers the
samplers share) and `configs` (tile configurations chosen by the committed tuning runs).
measure/ops/kernels.py registers them as candidates; nothing here times or checks them."""
