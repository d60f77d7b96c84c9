"""Tile configurations the campaign tries for the Triton fused-MoE kernel (importable without Triton)."""

from __future__ import annotations


def moe_configs(rows_per_expert: float, fp8: bool) -> list[tuple[int, int, int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages) candidates for a routed-row density,
    after vLLM's default and tuned H100 configs for E=128 small-N experts; the campaign times each."""
    bk = 128 if fp8 else 64
    if fp8 and rows_per_expert <= 24:
        return [(16, 64, 256, 1, 4, 4), (16, 128, 256, 1, 4, 4), (16, 64, 256, 1, 4, 5), (16, 256, 128, 1, 8, 4), (32, 128, 256, 1, 8, 3)]
    if rows_per_expert <= 2:
        return [(16, 64, 128 if not fp8 else 256, 1, 4, 4), (16, 128, bk, 1, 4, 3)]
    if rows_per_expert <= 24:
        return [(16, 64, 128 if not fp8 else 256, 1, 4, 4), (16, 128, 128, 1, 4, 3), (32, 64, 128, 1, 4, 4)]
    if rows_per_expert <= 96:
        return [(32, 128, bk, 8, 4, 4), (64, 64, 64 if not fp8 else 128, 8, 4, 3)]
    return [(64, 128, bk, 8, 4, 4), (128, 128, bk, 8, 8, 3)]


def moe_config_pairs(rows_per_expert: float, fp8: bool) -> list[tuple[tuple, tuple]]:
    """(gate_up tiles, down tiles) for the fused MoE with the Triton expert alignment: the best pairs
    of the per-GEMM tuning on the H200 (measure/ops/tune_moe.py, data/runs/ops/tune/) and the
    density's first default config for both GEMMs."""
    first = moe_configs(rows_per_expert, fp8)[0]
    if rows_per_expert <= 24:
        tuned = [((64, 128, 128, 1, 4, 3), (64, 128, 128, 1, 4, 3))] if fp8 else [((32, 64, 128, 1, 4, 4), (32, 64, 64, 1, 8, 5))]
    else:
        tuned = [((64, 128, 128, 1, 4, 4), (64, 128, 128, 1, 4, 3))] if fp8 else [((64, 128, 64, 1, 4, 4), (64, 128, 64, 1, 4, 3))]
    return [(first, first)] + [t for t in tuned if t != (first, first)]


def gemv_configs(m: int) -> list[tuple[int, int, int]]:
    """(BLOCK_N, BLOCK_K, warps) of the dense Triton GEMV at m rows: about 4-8k products per K step."""
    if m == 1:
        return [(4, 2048, 4), (8, 1024, 4), (16, 512, 8), (2, 4096, 4), (8, 2048, 8)]
    if m <= 2:
        return [(4, 1024, 4), (8, 512, 4)]
    if m <= 4:
        return [(4, 512, 4), (8, 256, 4)]
    return [(4, 256, 4), (8, 128, 4)]


def moe_gemv2_configs(fp8: bool, few: bool = False) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """((BLOCK_N, BLOCK_K, warps) of the gate_up GEMV, the same of the down GEMV) of the two-launch
    small-batch MoE; few: the tuned pairs and the campaign's batch-1 winners only (for the launch
    modes added later, so the candidate list does not double)."""
    tuned = ([((16, 512, 8), (4, 256, 4)), ((8, 512, 4), (8, 512, 8)), ((4, 4096, 4), (4, 256, 4))] if fp8
             else [((2, 4096, 4), (4, 1024, 4)), ((8, 1024, 4), (4, 256, 4))])  # measure/ops/tune_gemv.py on the H100 (data/runs/ops/tune/)
    if few:  # + the batch-1 winners of the committed tables (H100/H200, bf16/fp8)
        extra = [((4, 4096, 8), (4, 1024, 4)), ((4, 4096, 4), (4, 256, 4)), ((2, 4096, 4), (2, 1024, 4)), ((2, 4096, 4), (4, 1024, 4)),
                 ((4, 2048, 4), (4, 1024, 4))]
        return tuned + [c for c in extra if c not in tuned]
    return [((16, 512, 4), (8, 256, 4)), ((8, 1024, 4), (4, 512, 4)), ((32, 256, 4), (16, 256, 4)), ((4, 2048, 4), (4, 1024, 4)),
            ((8, 1024, 8), (8, 512, 8)), ((2, 4096, 4), (2, 1024, 4)), ((4, 4096, 8), (4, 1024, 4))] + tuned


def moe_fx_pairs(rows_per_expert: float, fp8: bool) -> list[tuple[tuple, tuple]]:
    """Tile pairs of the fused-launch MoE: the alignment pairs plus, for fp8 at moderate density
    (the 256-token layer), deeper K tiles and pipelines (memory-bound streaming of e4m3 weights)."""
    pairs = moe_config_pairs(rows_per_expert, fp8)
    if fp8 and 8 <= rows_per_expert <= 96:
        pairs += [((64, 128, 256, 1, 4, 3), (64, 128, 256, 1, 4, 3)), ((64, 64, 256, 1, 4, 4), (64, 64, 256, 1, 4, 4)),
                  ((64, 128, 128, 1, 4, 5), (64, 128, 128, 1, 4, 5)), ((64, 256, 128, 1, 8, 3), (64, 128, 128, 1, 4, 4))]
    return pairs


def moe_tma_pairs(rows_per_expert: float, fp8: bool) -> list[tuple[tuple, tuple]]:
    """Tile pairs of the fused-launch MoE with TMA weight tiles (BLOCK_N divides both GEMMs' N,
    1408 and 2816; BLOCK_M >= 64 for Hopper's warpgroup MMA)."""
    bk = 128 if fp8 else 64
    if rows_per_expert <= 96:
        pairs = [((64, 128, bk, 1, 4, 3), (64, 128, bk, 1, 4, 3)), ((64, 128, bk, 1, 4, 4), (64, 128, bk, 1, 4, 4)),
                 ((64, 64, 2 * bk, 1, 4, 4), (64, 64, 2 * bk, 1, 4, 4))]
        if fp8 and rows_per_expert >= 8:  # the 256-token layer: down GEMM with wider tiles, gate_up narrower, 8 warps, 2 stages
            pairs += [((64, 128, 128, 1, 4, 3), (64, 256, 128, 1, 8, 3)), ((64, 64, 128, 1, 4, 4), (64, 128, 128, 1, 4, 3)),
                      ((64, 128, 128, 1, 8, 3), (64, 128, 128, 1, 8, 3)), ((64, 128, 128, 1, 4, 2), (64, 128, 128, 1, 4, 2))]
        if rows_per_expert >= 24:  # prefill chunks (~32-96 routed rows per expert): one 128-row block per expert reads its
            # weights once (64-row blocks take two for half the experts), deeper pipelines for the longer K loops
            pairs += [((128, 128, bk, 1, 8, 3), (128, 128, bk, 1, 8, 3)), ((128, 128, bk, 1, 8, 4), (128, 128, bk, 1, 8, 4)),
                      ((128, 128, bk, 1, 4, 3), (128, 128, bk, 1, 8, 3)), ((64, 128, bk, 1, 4, 5), (64, 128, bk, 1, 4, 5)),
                      ((128, 64, bk, 1, 4, 4), (128, 128, bk, 1, 8, 3))]
        return pairs
    return [((64, 128, bk, 1, 4, 4), (64, 128, bk, 1, 4, 3)), ((128, 128, bk, 1, 8, 3), (128, 128, bk, 1, 8, 3))]
