"""`drill bench` workloads of the serving exercises: int8 matmul and attention read through a paged cache.

quant_matmul times `int8_matmul` on square (n x n) codes against
- fused: the fp32 matmul of the dequantised operands (dequantised once,
  untimed): the float GEMM that int8 weights and activations replace;
- math: the exact product of the codes in float64 (every partial sum of
  int8 x int8 products is an integer far below 2^53, so float64 is exact
  and runs on BLAS and on CUDA, where integer matmul has no kernel), then
  the two scales.
paged_kv times one decode step of `paged_attention` (one query per sequence)
over caches of T positions, filled in interleaved chunks so every sequence's
blocks are scattered through the pool, against
- fused: SDPA over the same keys stored contiguously (what paging costs);
- math: the reference's PagedKVCache and paged_attention.
"""

from __future__ import annotations

from typing import Any

from drill.bench.workload_kit import Call, Workload, gen, randn

QMAX = 127


# -- quant_matmul: int8_matmul on n x n codes ---------------------------------------------------


def _quantize(x: Any) -> tuple[Any, Any]:
    """The contract's row-wise codes (torch only: these callables run where drill is hidden)."""
    import torch

    xf = x.float()
    amax = xf.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    return torch.round(xf / scale[:, None]).clamp(-QMAX, QMAX).to(torch.int8), scale


def _quant_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    g = gen(seed, device)
    a_q, a_s = _quantize(randn(g, size, size, dtype=dtype, device=device))
    b_q, b_s = _quantize(randn(g, size, size, dtype=dtype, device=device))
    return {"a_q": a_q, "a_s": a_s, "b_q": b_q, "b_s": b_s}


def _quant_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    import torch

    if impl == "fused":
        a = x["a_q"].float() * x["a_s"][:, None]
        b = x["b_q"].float() * x["b_s"][:, None]
        return lambda: a @ b.T

    def exact() -> Any:
        acc = x["a_q"].double() @ x["b_q"].double().T
        return (acc * x["a_s"].double()[:, None] * x["b_s"].double()[None, :]).to(torch.float32)

    return exact


QUANT_MATMUL = Workload(
    exercise="quant_matmul",
    size_name="matrix size n (int8_matmul of n x n codes by n x n codes, row scales given)",
    size_label="n",
    ladder_cpu=(128, 256, 512, 1024),
    ladder_cuda=(1024, 2048, 4096, 8192),
    dims_cpu={},
    dims_cuda={},
    expected_exponent=3.0,
    expected_note="a GEMM: time ~n^3. An integer matmul has no BLAS kernel on CPU (and none on CUDA but "
    "torch._int_mm's), so expect it to be many times slower than the fp32 GEMM here",
    build=_quant_build,
    reference=_quant_reference,
    learner=lambda mod, x, dims: (lambda: mod.int8_matmul(x["a_q"], x["a_s"], x["b_q"], x["b_s"])),
    est_bytes=lambda size, dims, elem: 2 * size * size + 4 * size * size * 8,  # codes, an int64/float64 product, out
    tokens=lambda size, dims: size,
    bytes_moved=lambda size, dims, elem: 2 * size * size + 4 * size * size,
)


# -- paged_kv: one decode step of paged_attention over N caches of T positions ----------------


def _paged_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    g = gen(seed, device)
    n, h, h_kv, d = dims["N"], dims["H"], dims["H_kv"], dims["d_head"]
    return {"q": randn(g, n, h, d, dtype=dtype, device=device),
            "k": randn(g, n, size, h_kv, d, dtype=dtype, device=device),
            "v": randn(g, n, size, h_kv, d, dtype=dtype, device=device)}


def _fill(cache_cls: Any, x: dict, dims: dict) -> Any:
    """A cache holding every sequence, appended in chunks taken from each sequence in turn (untimed)."""
    n, size = x["k"].shape[0], x["k"].shape[1]
    block = dims["block_size"]
    num_blocks = n * -(-size // block)
    cache = cache_cls(num_blocks, block, dims["H_kv"], dims["d_head"], dtype=x["k"].dtype)
    for i in range(n):
        cache.allocate(i)
    chunk = max(block, size // 16)
    for start in range(0, size, chunk):
        for i in range(n):
            cache.append(i, x["k"][i, start:start + chunk], x["v"][i, start:start + chunk])
    return cache


def _paged_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    ids = list(range(x["q"].shape[0]))
    if impl == "fused":
        k = x["k"].permute(0, 2, 1, 3).contiguous()  # (N, H_kv, T, d): the same keys, stored contiguously
        v = x["v"].permute(0, 2, 1, 3).contiguous()
        q = x["q"][:, :, None, :]
        return lambda: ref.sdpa(q, k, v, impl="fused")[:, :, 0]
    cache = _fill(ref.PagedKVCache, x, dims)
    return lambda: ref.paged_attention(x["q"], cache, ids)


def _paged_learner(mod: Any, x: dict, dims: dict) -> Call:
    cache = _fill(mod.PagedKVCache, x, dims)
    ids = list(range(x["q"].shape[0]))
    return lambda: mod.paged_attention(x["q"], cache, ids)


def _paged_kv_bytes(size: int, dims: dict, elem: int) -> int:
    return 2 * dims["N"] * size * dims["H_kv"] * dims["d_head"] * elem


PAGED_KV = Workload(
    exercise="paged_kv",
    size_name="cache length T (one decode step of paged_attention for N sequences of T positions each)",
    size_label="cache T",
    ladder_cpu=(256, 512, 1024, 2048, 4096),
    ladder_cuda=(2048, 4096, 8192, 16384, 32768),
    dims_cpu={"N": 4, "H": 8, "H_kv": 2, "d_head": 64, "block_size": 16},
    dims_cuda={"N": 16, "H": 32, "H_kv": 8, "d_head": 128, "block_size": 16},
    expected_exponent=1.0,
    expected_note="a decode step reads every cached key once: time ~T (flat while per-call costs dominate)",
    build=_paged_build,
    reference=_paged_reference,
    learner=_paged_learner,
    # the inputs, the pools, a gathered fp32 copy of one sequence's keys and values, and their scores
    est_bytes=lambda size, dims, elem: (3 * _paged_kv_bytes(size, dims, elem)
                                        + 4 * size * dims["H"] * dims["d_head"] * 4),
    tokens=lambda size, dims: dims["N"],
    bytes_moved=_paged_kv_bytes,
    bandwidth_bound=True,
    memory_note="here, each sequence's keys and values gathered into contiguous copies, as the contract's gather "
    "returns them; the fused path reads keys already stored contiguously, and a paged kernel reads the blocks in "
    "place",
)
