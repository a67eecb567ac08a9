"""Reference-model benchmark: fused kernels vs the math path (ratios, not asserts).

    python benchmarks/reference_bench.py

CPU (always, well under 30 s on an idle 2-core box): a tiny Llama forward and a KV-cache decode loop, fused
vs math. CUDA (when present): causal GQA attention at T = 1k, 4k, 16k in bf16,
fused vs math, time and peak memory (math skipped where its T x T scores would
not fit); RMSNorm achieved bandwidth as a fraction of a device-to-device copy
measured in the same run (the practical peak, not the datasheet number).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial

import torch

from drill.reference import Decoder, LlamaConfig, rms_norm, sdpa


def time_cpu(fn: Callable[[], object], reps: int, warmup: int = 1) -> float:
    """Median wall seconds of `reps` calls after `warmup` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def time_cuda(fn: Callable[[], object], reps: int, warmup: int = 2) -> float:
    """Median seconds per call measured with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    return statistics.median(samples)


def row(*cells: object, widths: tuple[int, ...] = (34, 12, 12, 10)) -> str:
    pairs = enumerate(zip(cells, widths, strict=True))
    return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in pairs)


def cpu_bench() -> None:
    cfg = LlamaConfig(
        vocab_size=1024, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, rope_theta=500000.0,
    )
    torch.manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (1, 128))
    models = {impl: Decoder(cfg, impl=impl).eval() for impl in ("fused", "math")}
    models["math"].load_state_dict(models["fused"].state_dict())
    print(f"\nCPU, {torch.get_num_threads()} threads, tiny Llama (d=256, 4 layers, 8/2 heads), fp32")
    print(row("case", "fused ms", "math ms", "math/fused"))
    with torch.no_grad():
        fwd = {impl: time_cpu(lambda m=m: m(ids), reps=5) for impl, m in models.items()}
        print(row("forward B=1 T=128", f"{fwd['fused'] * 1e3:.1f}", f"{fwd['math'] * 1e3:.1f}",
                  f"{fwd['math'] / fwd['fused']:.2f}x"))
        gen = {impl: time_cpu(lambda m=m: m.generate(ids[:, :16], 16), reps=3) for impl, m in models.items()}
        print(row("generate 16 tok (ms per token)", f"{gen['fused'] / 16 * 1e3:.2f}", f"{gen['math'] / 16 * 1e3:.2f}",
                  f"{gen['math'] / gen['fused']:.2f}x"))
        q, k, v = torch.randn(1, 8, 1024, 64), torch.randn(1, 2, 1024, 64), torch.randn(1, 2, 1024, 64)
        att = {impl: time_cpu(lambda i=impl: sdpa(q, k, v, causal=True, impl=i), reps=5) for impl in ("fused", "math")}
        print(row("sdpa causal GQA T=1024", f"{att['fused'] * 1e3:.1f}", f"{att['math'] * 1e3:.1f}",
                  f"{att['math'] / att['fused']:.2f}x"))


def cuda_bench() -> None:
    dev = torch.device("cuda")
    print(f"\nCUDA: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("causal GQA attention, bf16, B=1, 32 query heads / 8 kv heads, d_head=128")
    print(row("T", "fused ms", "math ms", "math/fused", "fused GiB", "math GiB", widths=(8, 10, 10, 10, 10, 10)))
    h, h_kv, d = 32, 8, 128
    for t in (1024, 4096, 16384):
        q = torch.randn(1, h, t, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, h_kv, t, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, h_kv, t, d, device=dev, dtype=torch.bfloat16)
        res: dict[str, tuple[float, float] | None] = {}
        for impl in ("fused", "math"):
            # math holds fp32 scores + weights (2 x h x t x t x 4 bytes) plus the causal mask
            need = 2 * h * t * t * 4 + t * t
            free, _ = torch.cuda.mem_get_info()
            if impl == "math" and need > 0.8 * free:
                res[impl] = None
                continue
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            try:
                secs = time_cuda(partial(sdpa, q, k, v, causal=True, impl=impl), reps=5)
            except torch.cuda.OutOfMemoryError:
                res[impl] = None
                torch.cuda.empty_cache()
                continue
            res[impl] = (secs, (torch.cuda.max_memory_allocated() - base) / 2**30)
        f, m = res["fused"], res["math"]
        if f is None:
            print(row(t, "OOM", "-", "-", "-", "-", widths=(8, 10, 10, 10, 10, 10)))
            continue
        print(
            row(
                t, f"{f[0] * 1e3:.2f}", f"{m[0] * 1e3:.2f}" if m else "skipped", f"{m[0] / f[0]:.1f}x" if m else "-",
                f"{f[1]:.3f}", f"{m[1]:.2f}" if m else "OOM-risk", widths=(8, 10, 10, 10, 10, 10),
            )
        )
        del q, k, v

    # Practical peak bandwidth: a large device-to-device copy (read + write).
    src = torch.empty(2**30 // 2, dtype=torch.bfloat16, device=dev)  # 1 GiB
    dst = torch.empty_like(src)
    copy_s = time_cuda(partial(dst.copy_, src), reps=10)
    peak = 2 * src.numel() * 2 / copy_s
    del src, dst
    x = torch.randn(16384, 8192, device=dev, dtype=torch.bfloat16)  # 256 MiB
    w = torch.ones(8192, device=dev, dtype=torch.bfloat16)
    moved = 2 * x.numel() * x.element_size()  # read x, write out (weight negligible)
    print(f"\nRMSNorm (16384 x 8192 bf16) vs D2D copy peak {peak / 1e9:.0f} GB/s")
    print(row("impl", "ms", "GB/s", "of peak", widths=(10, 10, 10, 10)))
    for impl in ("fused", "math"):
        secs = time_cuda(lambda i=impl: rms_norm(x, w, 1e-6, impl=i), reps=10)
        bw = moved / secs
        print(row(impl, f"{secs * 1e3:.3f}", f"{bw / 1e9:.0f}", f"{bw / peak:.0%}", widths=(10, 10, 10, 10)))


def main() -> None:
    t0 = time.perf_counter()
    cpu_bench()
    if torch.cuda.is_available():
        cuda_bench()
    else:
        print("\nCUDA not available: GPU attention / bandwidth section skipped")
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
