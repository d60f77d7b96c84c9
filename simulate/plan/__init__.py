"""`costmodel plan`: the fewest replicas per (GPU, mode, QPS) meeting an SLO, their cost, and the
QPS at which the diffusion model stops paying off."""
