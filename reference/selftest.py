"""`python -m drill.reference.selftest`: do the fused kernels agree with the math path here?

On CUDA every part runs fused in bf16 — with SDPA restricted to the Flash,
memory-efficient and cuDNN kernels, so a silent fall-back to the slow math
kernel raises instead of passing — and is compared with the math path in
fp32. Without CUDA the same comparisons run fused-vs-math in fp32 on the CPU.
Exit status 0 when every comparison is within tolerance, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from . import _compat
from .attention import grouped_query_attention, multi_head_attention, sdpa
from .mlp import swiglu
from .model import Decoder, LlamaConfig
from .norm import rms_norm
from .rope import apply_rope
from .sampling import filter_logits


@dataclass
class Result:
    name: str
    error: float  # max |fused - math| / max |math|
    tol: float
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.error <= self.tol


@contextlib.contextmanager
def fused_kernels_only(device: torch.device) -> Iterator[None]:
    """On CUDA, forbid SDPA's math kernel so a fall-back is an error, not a slowdown."""
    if device.type != "cuda":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends.append(SDPBackend.CUDNN_ATTENTION)
    with sdpa_kernel(backends):
        yield


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach(), want.detach()
    if not torch.isfinite(got).all():
        return float("inf")
    scale = want.double().abs().max().clamp_min(1e-6)
    return float((got.double() - want.double()).abs().max() / scale)


def _cases(device: torch.device, big: bool) -> dict[str, Callable[[str, torch.dtype], torch.Tensor]]:
    """name -> fn(impl, dtype) giving an output to compare; inputs drawn once, in fp32."""
    g = torch.Generator(device="cpu").manual_seed(0)

    def rn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * scale).to(device)

    T = 512 if big else 64
    d_model = 1024 if big else 256
    n_heads, n_kv = d_model // 64, d_model // 128
    q, k, v = rn(2, 8, T, 64), rn(2, 2, T, 64), rn(2, 2, T, 64)
    mask = torch.rand(T // 4, T, generator=g).to(device) > 0.5
    mask[3] = False  # one query row that may attend to nothing
    x = rn(2, T, d_model)
    w_norm = rn(d_model, scale=0.2) + 1
    wq, wk, wv, wo = (rn(o, d_model, scale=d_model**-0.5) for o in (d_model, 64 * n_kv, 64 * n_kv, d_model))
    wg, wu = rn(3 * d_model, d_model, scale=d_model**-0.5), rn(3 * d_model, d_model, scale=d_model**-0.5)
    wd = rn(d_model, 3 * d_model, scale=(3 * d_model) ** -0.5)
    pos = torch.arange(100_000, 100_000 + T, device=device)

    def c(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return t.to(dtype)

    def sdpa_grad(impl: str, dtype: torch.dtype) -> torch.Tensor:
        qq = q.detach().to(dtype).clone().requires_grad_()  # a fresh leaf per run
        out = sdpa(qq, c(k, dtype), c(v, dtype), causal=True, impl=impl)
        out.float().pow(2).sum().backward()
        return qq.grad

    def gqa_cached(impl: str, dtype: torch.dtype) -> torch.Tensor:
        xs, w = c(x, dtype), [c(t, dtype) for t in (wq, wk, wv, wo)]
        head, (kp, vp) = grouped_query_attention(xs[:, : T - 8], *w, n_heads, n_kv, rope_base=1e4, impl=impl)
        tail, _ = grouped_query_attention(xs[:, T - 8 :], *w, n_heads, n_kv, rope_base=1e4, past_kv=(kp, vp), impl=impl)
        return torch.cat([head, tail], dim=1)

    cfg = LlamaConfig(
        vocab_size=512, hidden_size=d_model, intermediate_size=3 * d_model, num_hidden_layers=2,
        num_attention_heads=n_heads, num_key_value_heads=n_kv, rope_theta=500000.0,
    )
    torch.manual_seed(0)
    model = Decoder(cfg).to(device).eval()
    ids = torch.randint(0, 512, (2, T), generator=g).to(device)

    def decoder(impl: str, dtype: torch.dtype) -> torch.Tensor:
        m = Decoder(cfg, impl=impl).to(device=device, dtype=dtype).eval()
        m.load_state_dict(model.state_dict())
        with torch.no_grad():
            return m(ids)

    def decoder_cached(impl: str, dtype: torch.dtype) -> torch.Tensor:
        m = Decoder(cfg, impl=impl).to(device=device, dtype=dtype).eval()
        m.load_state_dict(model.state_dict())
        caches = m.new_caches(2, T)
        with torch.no_grad():
            parts = [m(ids[:, : T - 6], caches), m(ids[:, T - 6 : T - 3], caches)]
            parts += [m(ids[:, t : t + 1], caches) for t in range(T - 3, T)]
        return torch.cat(parts, dim=1)

    # Sampling: every decision must be the same in bf16 and fp32, so the 50 largest logits are multiples
    # of 1/16 in (4.9, 8] (exact in bf16) and all others below 4.5; top_k=50 keeps exactly that ladder.
    logits = rn(4, 8192 if big else 1024).clamp(-4.5, 4.5) * 0.9
    for row in range(logits.shape[0]):
        logits[row, torch.randperm(logits.shape[1], generator=g)[:50].to(device)] = 8.0 - torch.arange(
            50, device=device) / 16

    def sampling(impl: str, dtype: torch.dtype) -> torch.Tensor:
        return filter_logits(c(logits, dtype), 0.8, 50, 0.9, 0.07, impl=impl)

    return {
        "sdpa causal square (GQA)": lambda i, dt: sdpa(c(q, dt), c(k, dt), c(v, dt), causal=True, impl=i),
        "sdpa chunk T_q<T_k (bottom-right)": lambda i, dt: sdpa(c(q[:, :, -T // 4 :], dt), c(k, dt), c(v, dt),
                                                                causal=True, impl=i),
        "sdpa decode T_q=1": lambda i, dt: sdpa(c(q[:, :, -1:], dt), c(k, dt), c(v, dt), causal=True, impl=i),
        "sdpa bool mask + empty row": lambda i, dt: sdpa(c(q[:, :, : T // 4], dt), c(k, dt), c(v, dt), mask, impl=i),
        "sdpa grad dq": sdpa_grad,
        "rms_norm": lambda i, dt: rms_norm(c(x, dt) * 30, w_norm, 1e-5, impl=i),
        "rope half (pos 1e5)": lambda i, dt: apply_rope(c(q, dt), pos, 500000.0, "half", impl=i),
        "rope interleaved (pos 1e5)": lambda i, dt: apply_rope(c(q, dt), pos, 500000.0, "interleaved", impl=i),
        "swiglu": lambda i, dt: swiglu(c(x, dt), c(wg, dt), c(wu, dt), c(wd, dt), impl=i),
        "mha": lambda i, dt: multi_head_attention(c(x, dt), *(c(t, dt) for t in (wq, wq, wq, wo)), n_heads, impl=i),
        "gqa + past_kv": gqa_cached,
        "decoder logits": decoder,
        "decoder cached chunks+decode": decoder_cached,
        "filter_logits (temperature, top-k, top-p, min-p)": sampling,
    }


def run_checks(device: torch.device, dtype: torch.dtype, *, big: bool = False) -> list[Result]:
    """Compare fused (in `dtype`, fused SDPA kernels only on CUDA) with math in fp32."""
    tol_base = 1e-5 if dtype == torch.float32 else 3e-2
    results = []
    for name, fn in _cases(device, big).items():
        tol = tol_base * (3 if name.startswith("decoder") or "grad" in name else 1)
        try:
            want = fn("math", torch.float32)
            with fused_kernels_only(device):
                got = fn("fused", dtype)
            results.append(Result(name, _rel_err(got, want), tol))
        except Exception as exc:  # noqa: BLE001 - any failure of a part is a failed check, reported
            results.append(Result(name, float("inf"), tol, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"))
    return results


# -- which kernel ran, seen, not assumed -------------------------------------------------------------
#
# Each SDPA backend is forced alone (`sdpa_kernel([backend])`) and the aten ops that ran are recorded by a
# dispatch mode: the backend's own op must be among them and the math kernel's must not, and its output
# must agree with the math path. Then the default selection (no restriction) is watched the same way and
# must be the fused kernel `backend.sdpa_choice` names, the one the grader reports in `reference_backend`.
# RMSNorm: F.rms_norm must reach the fused `aten._fused_rms_norm` on CUDA where this torch has that op.

SDPA_OPS = {  # backend -> the aten op it runs, per device type
    "cuda": {"FLASH_ATTENTION": "_scaled_dot_product_flash_attention",
             "EFFICIENT_ATTENTION": "_scaled_dot_product_efficient_attention",
             "CUDNN_ATTENTION": "_scaled_dot_product_cudnn_attention",
             "MATH": "_scaled_dot_product_attention_math"},
    "cpu": {"FLASH_ATTENTION": "_scaled_dot_product_flash_attention_for_cpu",
            "MATH": "_scaled_dot_product_attention_math"},
}
OPTIONAL = {"CUDNN_ATTENTION"}  # a build without cuDNN's SDPA (or an older GPU) is reported, not failed


def ops_seen(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, set[str]]:
    """Run `fn` and return (its output, the aten op names it dispatched, overloads stripped)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(getattr(func, "__name__", str(func)).split(".")[0])
            return func(*args, **(kwargs or {}))

    with Record():
        out = fn()
    return out, seen


def _ran(backend: str, seen: set[str], device: torch.device) -> bool:
    """Did `backend`'s kernel run? A fused one shows as its own aten op; the math kernel is a composite that
    decomposes before a dispatch mode sees it, so it shows as no fused SDPA op at all (and a softmax)."""
    fused = {op for b, op in SDPA_OPS[device.type].items() if b != "MATH"}
    if backend == "MATH":
        return not (fused & seen) and any("softmax" in o for o in seen)
    return SDPA_OPS[device.type][backend] in seen


def backend_checks(device: torch.device, dtype: torch.dtype, tol: float) -> list[Result]:
    """Every SDPA backend of `device` forced alone, the default choice, and F.rms_norm: what ran, and agreement."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from .backend import sdpa_choice

    g = torch.Generator(device="cpu").manual_seed(1)
    q, k, v = (torch.randn(2, 8, 256, 64, generator=g).to(device) for _ in range(3))
    want = sdpa(q, k, v, causal=True, impl="math")
    results = []
    for name, op in SDPA_OPS[device.type].items():
        backend = getattr(SDPBackend, name, None)
        label = f"sdpa forced {name.lower()} -> aten.{op}"
        if backend is None:
            results.append(Result(label, 0.0 if name in OPTIONAL else float("inf"), tol, "not in this torch"))
            continue
        try:
            with sdpa_kernel([backend]):
                got, seen = ops_seen(lambda: sdpa(q.to(dtype), k.to(dtype), v.to(dtype), causal=True, impl="fused"))
        except RuntimeError as exc:
            why = str(exc).splitlines()[0][:100]
            results.append(Result(label, 0.0 if name in OPTIONAL else float("inf"), tol, f"unavailable: {why}"))
            continue
        ran = _ran(name, seen, device)
        results.append(Result(label, _rel_err(got, want) if ran else float("inf"), tol,
                              "" if ran else f"ran {sorted(o for o in seen if 'attention' in o)}"))
    chosen = sdpa_choice(q.to(dtype), k.to(dtype), v.to(dtype), None, True, 64 ** -0.5)
    got, seen = ops_seen(lambda: sdpa(q.to(dtype), k.to(dtype), v.to(dtype), causal=True, impl="fused"))
    ran = sorted(o for o in seen if "scaled_dot_product" in o)
    named = {"flash": "FLASH_ATTENTION", "memory-efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
             "math": "MATH"}.get(chosen, "")
    agrees = bool(named) and _ran(named, seen, device) and (device.type == "cpu" or chosen != "math")
    results.append(Result(f"sdpa default choice = {chosen} (dispatcher), ran {', '.join(ran)}",
                          _rel_err(got, want) if agrees else float("inf"), tol))
    x, w = torch.randn(64, 1024, generator=g).to(device), torch.randn(1024, generator=g).to(device)
    got, seen = ops_seen(lambda: rms_norm(x.to(dtype), w, 1e-6, impl="fused"))
    fused_op = hasattr(torch.ops.aten, "_fused_rms_norm") and device.type == "cuda"
    ok = "_fused_rms_norm" in seen or not fused_op
    what = "aten._fused_rms_norm" if "_fused_rms_norm" in seen else "decomposed ops"
    results.append(Result(f"rms_norm fused -> {what}", _rel_err(got, rms_norm(x, w, 1e-6, impl="math")) if ok
                          else float("inf"), tol, "" if ok else f"ran {sorted(seen)}"))
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the checks on CUDA if present (else CPU), print a table, return the exit status."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    print(f"torch {torch.__version__}; enable_gqa: {_compat.sdpa_has_enable_gqa()}")
    if cuda:
        liger = ", ".join(sorted(_compat.liger_ops())) or "not installed"
        liger += "" if _compat.liger_enabled() else " (off; DRILL_USE_LIGER=1 to test it)"
        print(f"device: {torch.cuda.get_device_name()}; fused bf16 vs math fp32; SDPA math kernel disabled; liger: "
              f"{liger}")
    else:
        print("CUDA not available: comparing fused vs math in fp32 on the CPU")
    results = run_checks(device, dtype, big=cuda)
    results += backend_checks(device, dtype, 1e-5 if dtype == torch.float32 else 3e-2)
    width = max(len(r.name) for r in results)
    for r in results:
        status = "ok  " if r.ok else "FAIL"
        print(f"{status} {r.name:<{width}}  rel err {r.error:9.2e}  (tol {r.tol:.0e}) {r.note}")
    failed = [r.name for r in results if not r.ok]
    print(f"{len(results) - len(failed)}/{len(results)} passed" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
