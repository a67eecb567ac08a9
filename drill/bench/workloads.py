"""What `drill bench` runs for each exercise, at each size of its ladder.

One `Workload` per exercise, as data: the size that varies (sequence length,
cache length or hidden size), the default ladders on CPU and on CUDA, the
fixed dimensions, the growth an efficient implementation shows, and three
functions:
- `build(size, dims, dtype, device)`: the inputs (and weights) for one size,
  shared by the learner and both reference paths;
- `reference(ref, impl, inputs, dims)` / `learner(mod, inputs, dims)`: return
  a zero-argument callable that runs ONE forward call (the thing timed);
  setup such as building the learner's module or prefilling a KV cache
  happens here, untimed.
The reference module is passed in (`ref`) rather than imported here: the
child loads it before the learner's file and then hides `drill` from the
learner, so nothing in these callables may import drill lazily.

Sizes are chosen so that the default CPU ladders (one thread) finish in
seconds per exercise with a textbook implementation, and the CUDA ladders
reach T = 16k for attention in bf16. Estimates (`est_bytes`) assume the
*naive* algorithm (T x T scores in fp32, a couple of temporaries): the ladder
stops before a size whose naive footprint would not fit, so a textbook
solution is never pushed into an out-of-memory kill.

Module-level code imports no torch: the parent validates options and
reads ladders before torch is loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drill.bench import workloads_backprop, workloads_serve
from drill.bench.workload_kit import Call, Workload, lm_loss_inputs, load_module
from drill.bench.workload_kit import gen as _gen
from drill.bench.workload_kit import linear_weights as _linear_weights
from drill.bench.workload_kit import randn as _randn
from drill.judge.registry import bench_names, default

# The contracts' defaults, read from the exercise index once (the callables below run where drill is hidden).
RMS_EPS = default("rmsnorm", "eps")
LN_EPS = default("layernorm", "eps")
CE_IGNORE_INDEX = default("cross_entropy", "ignore_index")
CE_LABEL_SMOOTHING = default("cross_entropy", "label_smoothing")
ROPE_BASE = default("rope", "base")
KV_ROPE_BASE = default("kv_cache", "rope_base")
BLOCK_EPS = default("decoder_block", "eps")
BLOCK_ROPE_BASE = default("decoder_block", "rope_base")
FFN_MULTIPLE_OF = default("swiglu", "multiple_of")


def ffn_hidden(d_model: int, multiple_of: int = FFN_MULTIPLE_OF) -> int:
    """SwiGLU hidden width of the contract (int(8/3 d) rounded up to multiple_of); no torch needed."""
    hidden = int(8 * d_model / 3)
    return multiple_of * -(-hidden // multiple_of)


# -- attention ----------------------------------------------------------------


def _attn_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    g = _gen(seed, device)
    b, h, d = dims["B"], dims["H"], dims["d_head"]
    return {k: _randn(g, b, h, size, d, dtype=dtype, device=device) for k in ("q", "k", "v")}


def _attn_est(size: int, dims: dict, elem: int) -> int:
    b, h, d = dims["B"], dims["H"], dims["d_head"]
    return 4 * b * h * size * d * elem + 3 * b * h * size * size * 4


ATTENTION = Workload(
    exercise="attention",
    size_name="sequence length T (q, k, v all of length T, no mask)",
    size_label="T",
    ladder_cpu=(128, 256, 512, 1024, 2048),
    ladder_cuda=(1024, 2048, 4096, 8192, 16384),
    dims_cpu={"B": 1, "H": 4, "d_head": 64},
    dims_cuda={"B": 1, "H": 16, "d_head": 128},
    expected_exponent=2.0,
    expected_note="T^2 compute for everyone; memory ~T for a fused kernel, ~T^2 when the T x T scores are materialised",
    build=_attn_build,
    reference=lambda ref, impl, x, dims: (lambda: ref.sdpa(x["q"], x["k"], x["v"], impl=impl)),
    learner=lambda mod, x, dims: (lambda: mod.scaled_dot_product_attention(x["q"], x["k"], x["v"])),
    est_bytes=_attn_est,
    tokens=lambda size, dims: dims["B"] * size,
)


# -- flash_attention: causal, square, so both alignments agree and SDPA's is_causal applies ------------------


def _flash_learner(mod: Any, x: dict, dims: dict) -> Call:
    return lambda: mod.flash_attention(x["q"], x["k"], x["v"], True)[0]  # (out, lse): out is what is compared


FLASH_ATTENTION = Workload(
    exercise="flash_attention",
    size_name="sequence length T (q, k, v all of length T, causal)",
    size_label="T",
    ladder_cpu=(256, 512, 1024, 2048, 4096),
    ladder_cuda=(1024, 2048, 4096, 8192),
    dims_cpu={"B": 1, "H": 2, "d_head": 64},
    dims_cuda={"B": 1, "H": 16, "d_head": 128},
    expected_exponent=2.0,
    expected_note="T^2 compute for everyone; memory ~T for tiles (yours, the fused kernel), ~T^2 for the math path's "
    "full score matrix",
    build=_attn_build,
    reference=lambda ref, impl, x, dims: (lambda: ref.sdpa(x["q"], x["k"], x["v"], causal=True, impl=impl)),
    learner=_flash_learner,
    est_bytes=_attn_est,
    tokens=lambda size, dims: dims["B"] * size,
)


# -- mha / gqa ----------------------------------------------------------------

_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")


def _proj_shapes(dims: dict) -> dict[str, tuple[int, int]]:
    d, h = dims["d_model"], dims["H"]
    kv = dims.get("H_kv", h) * (d // h)
    return {"q_proj.weight": (d, d), "k_proj.weight": (kv, d), "v_proj.weight": (kv, d), "o_proj.weight": (d, d)}


def _mha_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    g = _gen(seed, device)
    return {
        "x": _randn(g, dims["B"], size, dims["d_model"], dtype=dtype, device=device),
        "weights": _linear_weights(g, _proj_shapes(dims), dtype, device),
    }


def _w(x: dict) -> list:
    return [x["weights"][f"{p}.weight"] for p in _PROJ]


def _mha_est(size: int, dims: dict, elem: int) -> int:
    b, d, h = dims["B"], dims["d_model"], dims["H"]
    return 8 * b * size * d * elem + 3 * b * h * size * size * 4


def _mha_learner(mod: Any, x: dict, dims: dict) -> Call:
    m = load_module(lambda: mod.MultiHeadAttention(dims["d_model"], dims["H"]), x["weights"], x["x"].dtype,
                    x["x"].device)
    return lambda: m(x["x"])


MHA = Workload(
    exercise="mha",
    size_name="sequence length T (no mask)",
    size_label="T",
    ladder_cpu=(128, 256, 512, 1024, 2048),
    ladder_cuda=(1024, 2048, 4096, 8192, 16384),
    dims_cpu={"B": 1, "d_model": 256, "H": 4},
    dims_cuda={"B": 1, "d_model": 2048, "H": 16},
    expected_exponent=2.0,
    expected_note="projections ~T, attention ~T^2: the exponent approaches 2 as T grows",
    build=_mha_build,
    reference=lambda ref, impl, x, dims: (lambda: ref.multi_head_attention(x["x"], *_w(x), dims["H"], impl=impl)),
    learner=_mha_learner,
    est_bytes=_mha_est,
    tokens=lambda size, dims: dims["B"] * size,
)


def _gqa_learner(mod: Any, x: dict, dims: dict) -> Call:
    m = load_module(
        lambda: mod.GroupedQueryAttention(dims["d_model"], dims["H"], dims["H_kv"]), x["weights"], x["x"].dtype,
        x["x"].device,
    )
    return lambda: m(x["x"])


def _gqa_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    return lambda: ref.grouped_query_attention(x["x"], *_w(x), dims["H"], dims["H_kv"], causal=True, impl=impl)[0]


GQA = Workload(
    exercise="gqa",
    size_name="sequence length T (causal)",
    size_label="T",
    ladder_cpu=(128, 256, 512, 1024, 2048),
    ladder_cuda=(1024, 2048, 4096, 8192, 16384),
    dims_cpu={"B": 1, "d_model": 256, "H": 8, "H_kv": 2},
    dims_cuda={"B": 1, "d_model": 4096, "H": 32, "H_kv": 8},
    expected_exponent=2.0,
    expected_note="projections ~T, attention ~T^2: the exponent approaches 2 as T grows",
    build=_mha_build,
    reference=_gqa_reference,
    learner=_gqa_learner,
    est_bytes=_mha_est,
    tokens=lambda size, dims: dims["B"] * size,
)


# -- rope -----------------------------------------------------------------------


def _rope_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    import torch

    g = _gen(seed, device)
    x = _randn(g, dims["B"], dims["H"], size, dims["d_head"], dtype=dtype, device=device)
    return {"x": x, "positions": torch.arange(size, device=device)}


def _rope_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    conv = x.get("convention", "half")
    return lambda: ref.apply_rope(x["x"], x["positions"], ROPE_BASE, conv, impl=impl)


def _rope_learner(mod: Any, x: dict, dims: dict) -> Call:
    return lambda: mod.apply_rope(x["x"], x["positions"], ROPE_BASE)


def _rope_bytes(size: int, dims: dict, elem: int) -> int:
    return 2 * dims["B"] * dims["H"] * size * dims["d_head"] * elem


ROPE = Workload(
    exercise="rope",
    size_name="sequence length T",
    size_label="T",
    ladder_cpu=(1024, 2048, 4096, 8192, 16384),
    ladder_cuda=(8192, 16384, 32768, 65536, 131072),
    dims_cpu={"B": 1, "H": 8, "d_head": 64},
    dims_cuda={"B": 1, "H": 32, "d_head": 128},
    expected_exponent=1.0,
    expected_note="elementwise: time ~T, bound by memory bandwidth",
    build=_rope_build,
    reference=_rope_reference,
    learner=_rope_learner,
    est_bytes=lambda size, dims, elem: 8 * dims["B"] * dims["H"] * size * dims["d_head"] * 4,
    tokens=lambda size, dims: dims["B"] * size,
    bytes_moved=_rope_bytes,
    bandwidth_bound=True,
)


# -- rmsnorm --------------------------------------------------------------------


def _norm_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0, bias: bool = False) -> dict:
    g = _gen(seed, device)
    weights = {"weight": 1.0 + 0.1 * _randn(g, size, dtype=dtype, device=device)}
    x = _randn(g, dims["N"], size, dtype=dtype, device=device)
    if bias:  # drawn last: RMSNorm's inputs are the same with or without it
        weights["bias"] = 0.1 * _randn(g, size, dtype=dtype, device=device)
    return {"x": x, "weights": weights}


def _norm_learner(cls: str) -> Callable[..., Call]:
    """The learner's norm module `cls`(d_model) loaded with the shared weights, called on x."""

    def learner(mod: Any, x: dict, dims: dict) -> Call:
        m = load_module(lambda: getattr(mod, cls)(x["x"].shape[-1]), x["weights"], x["x"].dtype, x["x"].device)
        return lambda: m(x["x"])

    return learner


RMSNORM = Workload(
    exercise="rmsnorm",
    size_name="hidden size (N tokens fixed)",
    size_label="d_model",
    ladder_cpu=(512, 1024, 2048, 4096, 8192),
    ladder_cuda=(1024, 2048, 4096, 8192, 16384),
    dims_cpu={"N": 1024},
    dims_cuda={"N": 16384},
    expected_exponent=1.0,
    expected_note="one read and one write of x: time ~d, bound by memory bandwidth",
    build=_norm_build,
    reference=lambda ref, impl, x, dims: (lambda: ref.rms_norm(x["x"], x["weights"]["weight"], RMS_EPS, impl=impl)),
    learner=_norm_learner("RMSNorm"),
    est_bytes=lambda size, dims, elem: 6 * dims["N"] * size * 4,
    tokens=lambda size, dims: dims["N"],
    bytes_moved=lambda size, dims, elem: (2 * dims["N"] * size + size) * elem,
    bandwidth_bound=True,
)


# -- layernorm --------------------------------------------------------------------


def _layernorm_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    w = x["weights"]
    return lambda: ref.layer_norm(x["x"], w["weight"], w["bias"], LN_EPS, impl=impl)


LAYERNORM = Workload(
    exercise="layernorm",
    size_name="hidden size (N tokens fixed)",
    size_label="d_model",
    ladder_cpu=RMSNORM.ladder_cpu,
    ladder_cuda=RMSNORM.ladder_cuda,
    dims_cpu=RMSNORM.dims_cpu,
    dims_cuda=RMSNORM.dims_cuda,
    expected_exponent=1.0,
    expected_note="one read and one write of x (two statistics per token): time ~d, bound by memory bandwidth",
    build=lambda size, dims, dtype, device, seed=0: _norm_build(size, dims, dtype, device, seed, bias=True),
    reference=_layernorm_reference,
    learner=_norm_learner("LayerNorm"),
    est_bytes=lambda size, dims, elem: 7 * dims["N"] * size * 4,
    tokens=lambda size, dims: dims["N"],
    bytes_moved=lambda size, dims, elem: (2 * dims["N"] * size + 2 * size) * elem,
    bandwidth_bound=True,
)


# -- cross_entropy ------------------------------------------------------------------


def _ce_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    return lm_loss_inputs(size, dims, dtype, device, seed, CE_IGNORE_INDEX)


def _ce_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    return lambda: ref.cross_entropy(x["logits"], x["targets"], CE_IGNORE_INDEX, CE_LABEL_SMOOTHING, impl=impl)


CROSS_ENTROPY = Workload(
    exercise="cross_entropy",
    size_name="vocabulary size V (N tokens fixed, a tenth of the targets ignored)",
    size_label="V",
    ladder_cpu=(2048, 4096, 8192, 16384, 32768),
    ladder_cuda=(8192, 16384, 32768, 65536, 131072),
    dims_cpu={"N": 256},
    dims_cuda={"N": 8192},
    expected_exponent=1.0,
    expected_note="one read of the N x V logits: time ~V, bound by memory bandwidth",
    build=_ce_build,
    reference=_ce_reference,
    learner=lambda mod, x, dims: (lambda: mod.cross_entropy(x["logits"], x["targets"])),
    est_bytes=lambda size, dims, elem: dims["N"] * size * (elem + 4 * 4),  # the logits and ~4 fp32 copies
    tokens=lambda size, dims: dims["N"],
    bytes_moved=lambda size, dims, elem: dims["N"] * size * elem + dims["N"] * 8,
    bandwidth_bound=True,
)


# -- swiglu -----------------------------------------------------------------------


def _swiglu_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    g = _gen(seed, device)
    ff = ffn_hidden(size)
    shapes = {"w_gate.weight": (ff, size), "w_up.weight": (ff, size), "w_down.weight": (size, ff)}
    return {"x": _randn(g, dims["N"], size, dtype=dtype, device=device),
            "weights": _linear_weights(g, shapes, dtype, device)}


def _swiglu_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    w = x["weights"]
    return lambda: ref.swiglu(x["x"], w["w_gate.weight"], w["w_up.weight"], w["w_down.weight"], impl=impl)


def _swiglu_learner(mod: Any, x: dict, dims: dict) -> Call:
    d = x["x"].shape[-1]
    m = load_module(lambda: mod.SwiGLU(d, ffn_hidden(d)), x["weights"], x["x"].dtype, x["x"].device)
    return lambda: m(x["x"])


SWIGLU = Workload(
    exercise="swiglu",
    size_name="d_model (d_ff = ffn_hidden_dim(d_model), N tokens fixed)",
    size_label="d_model",
    ladder_cpu=(128, 256, 512, 1024),
    ladder_cuda=(1024, 2048, 4096, 8192),
    dims_cpu={"N": 128},
    dims_cuda={"N": 8192},
    expected_exponent=2.0,
    expected_note="three d x d_ff matmuls: time ~d^2",
    build=_swiglu_build,
    reference=_swiglu_reference,
    learner=_swiglu_learner,
    est_bytes=lambda size, dims, elem: 3 * size * ffn_hidden(size) * elem + 6 * dims["N"] * ffn_hidden(size) * 4,
    tokens=lambda size, dims: dims["N"],
    bytes_moved=lambda size, dims, elem: (3 * size * ffn_hidden(size) + 2 * dims["N"] * size) * elem,
    bandwidth_bound=True,
)


# -- kv_cache: one decode step against a cache of length T ---------------------------


def _kv_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    g = _gen(seed, device)
    b, d, h, h_kv = dims["B"], dims["d_model"], dims["H"], dims["H_kv"]
    dh = d // h
    return {
        "prompt": _randn(g, b, size, d, dtype=dtype, device=device),
        "step": _randn(g, b, 1, d, dtype=dtype, device=device),
        "cache": (_randn(g, b, h_kv, size, dh, dtype=dtype, device=device),
                  _randn(g, b, h_kv, size, dh, dtype=dtype, device=device)),
        "weights": _linear_weights(g, _proj_shapes(dims), dtype, device),
    }


class _Decoder:
    """A decode loop, one step per call: each call feeds back the cache the previous one returned.

    Feeding back the very tuple returned (as a generation loop does) is what
    lets a module that recognises its own cache do its (wasteful) thing, so
    the timing shows it. The cache grows by one token per call; with a few
    dozen calls against thousands of cached tokens that drift is negligible.
    """

    def __init__(self, step: Callable[[Any], Any], cache: Any) -> None:
        self._step, self.cache = step, cache

    def __call__(self) -> Any:
        out, self.cache = self._step(self.cache)
        return out


def _kv_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    w = _w(x)

    def step(cache: Any) -> Any:
        return ref.grouped_query_attention(
            x["step"], *w, dims["H"], dims["H_kv"], rope_base=KV_ROPE_BASE, past_kv=cache, impl=impl
        )

    return _Decoder(step, x["cache"])


def _kv_learner(mod: Any, x: dict, dims: dict) -> Call:
    """Build the learner's module, prefill the prompt through it in chunks (untimed), then decode."""
    prompt = x["prompt"]
    m = load_module(lambda: mod.CachedSelfAttention(dims["d_model"], dims["H"], dims["H_kv"], KV_ROPE_BASE),
                    x["weights"], prompt.dtype, prompt.device)
    cache = None
    chunk = dims["prefill_chunk"]
    for start in range(0, prompt.shape[1], chunk):
        _, cache = m(prompt[:, start : start + chunk], past_kv=cache)
    return _Decoder(lambda c: m(x["step"], past_kv=c), cache)


def _kv_est(size: int, dims: dict, elem: int) -> int:
    b, d, h, h_kv = dims["B"], dims["d_model"], dims["H"], dims["H_kv"]
    cache = 2 * b * h_kv * size * (d // h) * elem
    return 4 * cache + 3 * b * h * dims["prefill_chunk"] * size * 4 + b * size * d * elem


KV_CACHE = Workload(
    exercise="kv_cache",
    size_name="cache length T (time of ONE decode step after a T-token prompt)",
    size_label="cache T",
    ladder_cpu=(256, 512, 1024, 2048, 4096),
    ladder_cuda=(1024, 2048, 4096, 8192, 16384),
    dims_cpu={"B": 1, "d_model": 256, "H": 8, "H_kv": 2, "prefill_chunk": 256},
    dims_cuda={"B": 1, "d_model": 4096, "H": 32, "H_kv": 8, "prefill_chunk": 1024},
    expected_exponent=1.0,
    expected_note="a decode step reads the cache once: time ~T at most (flat while fixed costs dominate); "
    "~T^2 means the past is recomputed",
    build=_kv_build,
    reference=_kv_reference,
    learner=_kv_learner,
    est_bytes=_kv_est,
    tokens=lambda size, dims: dims["B"],
    comparable=False,  # your cache holds your prefill, the reference's a random one: outputs differ by design
)


# -- decoder_block: one pre-norm layer at sequence length T ----------------------------

_BLOCK_PATHS = {  # the exercise's attribute paths -> the reference layer's (decoder.BLOCK_PATHS, without torch)
    "attn.q_proj.weight": "self_attn.q_proj.weight", "attn.k_proj.weight": "self_attn.k_proj.weight",
    "attn.v_proj.weight": "self_attn.v_proj.weight", "attn.o_proj.weight": "self_attn.o_proj.weight",
    "mlp.w_gate.weight": "mlp.gate_proj.weight", "mlp.w_up.weight": "mlp.up_proj.weight",
    "mlp.w_down.weight": "mlp.down_proj.weight", "attn_norm.weight": "input_layernorm.weight",
    "mlp_norm.weight": "post_attention_layernorm.weight",
}


def _block_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    import torch

    g = _gen(seed, device)
    d, h, h_kv, ff = dims["d_model"], dims["H"], dims["H_kv"], dims["d_ff"]
    shapes = {f"attn.{k}": v for k, v in _proj_shapes({"d_model": d, "H": h, "H_kv": h_kv}).items()}
    shapes.update({"mlp.w_gate.weight": (ff, d), "mlp.w_up.weight": (ff, d), "mlp.w_down.weight": (d, ff)})
    weights = _linear_weights(g, shapes, dtype, device)
    for norm in ("attn_norm.weight", "mlp_norm.weight"):
        weights[norm] = 1.0 + 0.1 * _randn(g, d, dtype=dtype, device=device)
    x = _randn(g, dims["B"], size, d, dtype=dtype, device=device)
    return {"x": x, "positions": torch.arange(size, device=device), "weights": weights}


def _block_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    def factory() -> Any:
        return ref.llama_block(dims["d_model"], dims["H"], dims["H_kv"], dims["d_ff"], BLOCK_EPS, BLOCK_ROPE_BASE,
                               x.get("convention", "half"), impl=impl)

    block = load_module(factory, {_BLOCK_PATHS[k]: v for k, v in x["weights"].items()}, x["x"].dtype, x["x"].device)
    return lambda: block(x["x"], x["positions"])


def _block_learner(mod: Any, x: dict, dims: dict) -> Call:
    m = load_module(lambda: mod.DecoderBlock(dims["d_model"], dims["H"], dims["H_kv"], dims["d_ff"]), x["weights"],
                    x["x"].dtype, x["x"].device)
    return lambda: m(x["x"], x["positions"])


def _block_est(size: int, dims: dict, elem: int) -> int:
    b, d, h, ff = dims["B"], dims["d_model"], dims["H"], dims["d_ff"]
    return 12 * b * size * d * elem + 4 * b * size * ff * 4 + 3 * b * h * size * size * 4


DECODER_BLOCK = Workload(
    exercise="decoder_block",
    size_name="sequence length T (positions 0..T-1, causal)",
    size_label="T",
    ladder_cpu=(128, 256, 512, 1024, 2048),
    ladder_cuda=(1024, 2048, 4096, 8192, 16384),
    dims_cpu={"B": 1, "d_model": 256, "H": 8, "H_kv": 2, "d_ff": 768},
    dims_cuda={"B": 1, "d_model": 4096, "H": 32, "H_kv": 8, "d_ff": 14336},
    expected_exponent=2.0,
    expected_note="projections and the MLP ~T, attention ~T^2: the exponent approaches 2 as T grows",
    build=_block_build,
    reference=_block_reference,
    learner=_block_learner,
    est_bytes=_block_est,
    tokens=lambda size, dims: dims["B"] * size,
)


# -- moe: a fixed batch of tokens through more and more experts -----------------------------


def _moe_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    g = _gen(seed, device)
    d, ff = dims["d_model"], dims["d_ff"]
    shapes = {"router.weight": (size, d)}
    for e in range(size):
        shapes.update({f"experts.{e}.w_gate.weight": (ff, d), f"experts.{e}.w_up.weight": (ff, d),
                       f"experts.{e}.w_down.weight": (d, ff)})
    x = _randn(g, 1, dims["N"], d, dtype=dtype, device=device)
    return {"x": x, "weights": _linear_weights(g, shapes, dtype, device)}


def _moe_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    w = x["weights"]
    n_experts = w["router.weight"].shape[0]
    experts = [tuple(w[f"experts.{e}.{n}.weight"] for n in ("w_gate", "w_up", "w_down")) for e in range(n_experts)]
    norm = x.get("norm_topk_prob", True)
    return lambda: ref.moe(x["x"], w["router.weight"], experts, dims["top_k"], norm, impl=impl)[0]


def _moe_learner(mod: Any, x: dict, dims: dict) -> Call:
    n_experts = x["weights"]["router.weight"].shape[0]
    m = load_module(lambda: mod.MoE(dims["d_model"], dims["d_ff"], n_experts, dims["top_k"]), x["weights"],
                    x["x"].dtype, x["x"].device)
    return lambda: m(x["x"])[0]  # the output; the aux loss is computed (and timed) too


def _moe_bytes(size: int, dims: dict, elem: int) -> int:
    d, ff, n = dims["d_model"], dims["d_ff"], dims["N"]
    return size * (3 * d * ff + d) * elem + 2 * n * d * elem


MOE = Workload(
    exercise="moe",
    size_name="number of experts (N tokens, top_k and the expert size fixed)",
    size_label="experts",
    ladder_cpu=(4, 8, 16, 32, 64),
    ladder_cuda=(8, 16, 32, 64, 128),
    dims_cpu={"N": 256, "d_model": 128, "d_ff": 256, "top_k": 2},
    dims_cuda={"N": 8192, "d_model": 2048, "d_ff": 1408, "top_k": 2},
    expected_exponent=0.5,
    expected_note="routed: each token runs top_k experts however many exist, so the expert FLOPs stay flat; the router "
    "and one small matmul triple per expert grow with the count (~experts^0.5 measured on CPU); ~experts^1 means "
    "every expert runs on every token",
    build=_moe_build,
    reference=_moe_reference,
    learner=_moe_learner,
    est_bytes=lambda size, dims, elem: _moe_bytes(size, dims, 4) + 6 * dims["N"] * dims["top_k"] * dims["d_ff"] * 4,
    tokens=lambda size, dims: dims["N"],
    bytes_moved=_moe_bytes,
)


# -- sampling: filter_logits over one batch of next-token logits ---------------------------------

# One setting of every option, so each step runs. The logits are built so that the decisions are
# clear in any dtype (the contract's "no ties"): the TOP_K largest logits are a strictly decreasing
# ladder from 8 to 5 (0.05 apart: distinct in bf16, whose spacing there is 0.03), every other logit
# is below 4.5, and top_p / min_p fall between ladder rungs (checked by tests/test_bench_sampling.py), so
# the learner's probabilities can be compared with the fused reference's at any vocabulary size.
SAMPLING_OPTIONS = {"temperature": 0.8, "top_k": 50, "top_p": 0.9, "min_p": 0.07}


def _sampling_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    import torch

    g = _gen(seed, device)
    b, k = dims["B"], SAMPLING_OPTIONS["top_k"]
    logits = _randn(g, b, size, dtype=torch.float32, device=device).clamp_(-4.5, 4.5) * 0.9
    ladder = torch.linspace(8.0, 5.0, k, device=device)
    for row in range(b):
        top = torch.randperm(size, generator=g, device=device)[:k]
        logits[row, top] = ladder
    return {"logits": logits.to(dtype)}


def _sampling_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    o = SAMPLING_OPTIONS
    return lambda: ref.filter_logits(x["logits"], o["temperature"], o["top_k"], o["top_p"], o["min_p"], impl=impl)


def _sampling_learner(mod: Any, x: dict, dims: dict) -> Call:
    o = SAMPLING_OPTIONS
    return lambda: mod.filter_logits(x["logits"], o["temperature"], o["top_k"], o["top_p"], o["min_p"])


SAMPLING = Workload(
    exercise="sampling",
    size_name="vocabulary size V (B rows of logits, temperature 0.8, top_k 50, top_p 0.9, min_p 0.07)",
    size_label="V",
    ladder_cpu=(4096, 16384, 65536, 262144),
    ladder_cuda=(32768, 65536, 131072, 262144, 524288),
    dims_cpu={"B": 8},
    dims_cuda={"B": 64},
    expected_exponent=1.0,
    expected_note="top-k and the elementwise steps ~V; sorting the whole row for top-p adds a log V "
    "(sorting only the top_k survivors avoids it)",
    build=_sampling_build,
    reference=_sampling_reference,
    learner=_sampling_learner,
    est_bytes=lambda size, dims, elem: 12 * dims["B"] * size * 4,
    tokens=lambda size, dims: dims["B"],
    bytes_moved=lambda size, dims, elem: dims["B"] * size * (elem + 4),
)


# Every Workload defined above; which exercises have one is the index's `bench` flag, in its
# order (tests/test_exercise_index.py checks that the two agree, both ways).
_DEFINED: dict[str, Workload] = {
    w.exercise: w
    for w in (*globals().values(), *vars(workloads_backprop).values(), *vars(workloads_serve).values())
    if isinstance(w, Workload)
}
WORKLOADS: dict[str, Workload] = {name: _DEFINED[name] for name in bench_names() if name in _DEFINED}


def workload(exercise: str) -> Workload:
    """The workload of an exercise; KeyError for one without a benchmark."""
    return WORKLOADS[exercise]
