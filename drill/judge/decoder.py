"""The in-model check's decoder as the child runs it: a torch-only tiny Llama, sent without the graded part.

The parent computes the expected logits and tokens with `drill.reference`'s
decoder (inmodel.py). The child must not see drill at all, so it rebuilds the
same network from this file, which the parent hands over *as source text in
the job* with the graded exercise's own component cut out (`source_for`):
grading rmsnorm, the child gets no RMSNorm here, only the learner's; grading
kv_cache, it gets neither attention nor RoPE. Every other component is the
reference's math path written out again (fp32 accumulation, the same
formulas), and tests/test_judge_inmodel.py holds this decoder with every
component present to drill.reference's logits.

Parameter names are Hugging Face Llama's, as in drill.reference.model, so
the parent's state dict loads unchanged; a component the source lacks is a
`Slot` holding its parameters until the learner's module replaces it
(`swap`, weights copied by name up to the exercise aliases).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

# Top-level names cut from the source sent to the child, per graded exercise.
GRADED_PARTS = {
    "rmsnorm": ("RMSNorm",),
    "swiglu": ("SwiGLU",),
    "rope": ("apply_rope",),
    "attention": ("attend",),
    "gqa": ("attend", "apply_rope"),
    "kv_cache": ("attend", "apply_rope"),
    "mla": ("attend", "apply_rope"),
    # Nothing cut: the learner's function and cache go behind the decoder's own projections and RoPE.
    "sliding_window": (),
    # The whole layer is the learner's: no attention, RoPE, MLP or block of the reference's is sent
    # (RMSNorm stays, for the final norm after the last block).
    "decoder_block": ("Block", "Attention", "attend", "apply_rope", "SwiGLU"),
    # Nothing cut: the learner's LoRALinear wraps the decoder's own q and v projections (lora_run).
    "lora": (),
}

# The decoder_block exercise's attribute paths -> the reference layer's (Hugging Face Llama) names.
BLOCK_PATHS = {
    "attn.q_proj.weight": "self_attn.q_proj.weight",
    "attn.k_proj.weight": "self_attn.k_proj.weight",
    "attn.v_proj.weight": "self_attn.v_proj.weight",
    "attn.o_proj.weight": "self_attn.o_proj.weight",
    "mlp.w_gate.weight": "mlp.gate_proj.weight",
    "mlp.w_up.weight": "mlp.up_proj.weight",
    "mlp.w_down.weight": "mlp.down_proj.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "mlp_norm.weight": "post_attention_layernorm.weight",
}


def source_for(exercise: str) -> str:
    """This file's source without the graded exercise's component (and without this function's own imports)."""
    from drill.judge.source import parse  # in this function: cut from what the child runs, like the two below

    text = Path(__file__).read_text(encoding="utf-8")
    tree = parse(text)
    cut = set(GRADED_PARTS.get(exercise, ())) | {"source_for"}
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    for node in tree.body:
        name = getattr(node, "name", None)
        if name in cut:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            drop.update(range(start - 1, node.end_lineno))
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(a.name in ("ast", "Path") for a in node.names):
            drop.update(range(node.lineno - 1, node.end_lineno))
    return "".join(line for i, line in enumerate(lines) if i not in drop)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.gate_proj(x).float()
        hidden = (g * torch.sigmoid(g) * self.up_proj(x).float()).to(x.dtype)
        return self.down_proj(hidden)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float, convention: str = "half") -> torch.Tensor:
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64, device=x.device).float() / d))
    angles = positions.to(x.device).float()[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    xf = x.float()
    a, b = (xf[..., : d // 2], xf[..., d // 2 :]) if convention == "half" else (xf[..., 0::2], xf[..., 1::2])
    ra, rb = a * cos - b * sin, a * sin + b * cos
    out = torch.cat([ra, rb], dim=-1) if convention == "half" else torch.stack([ra, rb], dim=-1).flatten(-2)
    return out.to(x.dtype)


def causal_mask(t_q: int, t_k: int, device: Any = None) -> torch.Tensor:
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal (bottom-right) grouped-query attention in fp32, cast back to q's dtype."""
    group = q.shape[-3] // k.shape[-3]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scores = (q.float() @ k.float().transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if q.shape[-2] > 1:
        scores = scores.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype)


class KVCache:
    def __init__(self, batch: int, n_kv_heads: int, max_len: int, d_head: int, dtype: torch.dtype) -> None:
        self.k = torch.zeros(batch, n_kv_heads, max_len, d_head, dtype=dtype)
        self.v = torch.zeros(batch, n_kv_heads, max_len, d_head, dtype=dtype)
        self.length = 0

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.length, self.length + k_new.shape[2]
        self.k[:, :, start:end] = k_new
        self.v[:, :, start:end] = v_new
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]


def _split(x: torch.Tensor, n: int) -> torch.Tensor:
    b, t, f = x.shape
    return x.view(b, t, n, f // n).transpose(1, 2)


def _merge(x: torch.Tensor) -> torch.Tensor:
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


class Slot(nn.Module):
    """Holds a cut component's parameters (reference names) until the learner's module replaces it."""

    def __init__(self, **linears: tuple[int, int]) -> None:
        super().__init__()
        for name, (fan_in, fan_out) in linears.items():
            setattr(self, name, nn.Linear(fan_in, fan_out, bias=False))

    def forward(self, *args: Any) -> Any:
        raise RuntimeError("the graded component was not swapped in")


class NormSlot(Slot):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


def _attention_linears(c: dict) -> dict:
    d, h, h_kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    dh = d // h
    return {"q_proj": (d, h * dh), "k_proj": (d, h_kv * dh), "v_proj": (d, h_kv * dh), "o_proj": (h * dh, d)}


class Attention(nn.Module):
    """The reference decoder's attention: projections, RoPE on q/k, optional cache; rope_fn/attn_fn swappable."""

    def __init__(self, c: dict, convention: str) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.base = c["num_attention_heads"], c["num_key_value_heads"], c["rope_theta"]
        self.convention = convention
        self.rope_fn = None
        self.attn_fn = None
        for name, (fan_in, fan_out) in _attention_linears(c).items():
            setattr(self, name, nn.Linear(fan_in, fan_out, bias=False))

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.rope_fn is not None:
            return self.rope_fn(x, positions, self.base)
        return apply_rope(x, positions, self.base, self.convention)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        q = self._rope(_split(self.q_proj(x), self.n_heads), positions)
        k = self._rope(_split(self.k_proj(x), self.n_kv_heads), positions)
        v = _split(self.v_proj(x), self.n_kv_heads)
        if cache is not None:
            k, v = cache.update(k, v)
        if self.attn_fn is None:
            out = attend(q, k, v)
        else:
            group = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            out = self.attn_fn(q, k, v, causal_mask(q.shape[2], k.shape[2], q.device))
        return self.o_proj(_merge(out))


class WindowAttention(nn.Module):
    """A sliding_window exercise's function (full forward) and cache (generation) behind the decoder's attention.

    The decoder's projections and RoPE stay; the learner's code sees full heads (GQA's K/V repeated), as its
    contract has one H for q, k and v.
    """

    def __init__(self, base: Attention, fn: Any, window: int) -> None:
        super().__init__()
        self.base, self.fn, self.window = base, fn, window

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: Any = None) -> torch.Tensor:
        b = self.base
        q = b._rope(_split(b.q_proj(x), b.n_heads), positions)
        k = b._rope(_split(b.k_proj(x), b.n_kv_heads), positions)
        v = _split(b.v_proj(x), b.n_kv_heads)
        group = b.n_heads // b.n_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = self.fn(q, k, v, self.window) if cache is None else cache(q, k, v)
        return b.o_proj(_merge(out))


class RollingSlot:
    """A sliding_window exercise's RollingKVCache with the decoder cache's `length` (positions seen so far)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.length = inner, 0

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = self.inner.attend(q, k, v)
        self.length += q.shape[-2]
        return out


class PastKVAttention(nn.Module):
    """A kv_cache-exercise module (forward(x, past_kv) -> (out, (k_all, v_all))) behind the decoder's cache."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        if cache is None:
            return self.inner(x)[0]
        t_past = cache.length
        past = None if t_past == 0 else (cache.k[:, :, :t_past], cache.v[:, :, :t_past])
        out, (k_all, v_all) = self.inner(x, past_kv=past)
        cache.update(k_all[:, :, t_past:], v_all[:, :, t_past:])
        return out


class LatentCache:
    """mla's cache in the decoder: preallocated (B, max_len, r) latents and (B, max_len, d_r) rotary keys."""

    def __init__(self, batch: int, max_len: int, rank: int, d_rope: int, dtype: torch.dtype) -> None:
        self.c = torch.zeros(batch, max_len, rank, dtype=dtype)
        self.k = torch.zeros(batch, max_len, d_rope, dtype=dtype)
        self.length = 0

    def update(self, c_new: torch.Tensor, k_new: torch.Tensor) -> None:
        start, end = self.length, self.length + c_new.shape[1]
        self.c[:, start:end] = c_new
        self.k[:, start:end] = k_new
        self.length = end


class LatentPastAttention(nn.Module):
    """An mla-exercise module (forward(x, past) -> (out, (c_kv_all, k_rope_all))) behind the decoder's cache."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: LatentCache | None = None) -> torch.Tensor:
        if cache is None:
            return self.inner(x)[0]
        t_past = cache.length
        past = None if t_past == 0 else (cache.c[:, :t_past], cache.k[:, :t_past])
        out, (c_all, k_all) = self.inner(x, past=past)
        cache.update(c_all[:, t_past:], k_all[:, t_past:])
        return out


def _mla_slot(c: dict) -> nn.Module:
    d, h, r = c["hidden_size"], c["num_attention_heads"], c["kv_lora_rank"]
    dn, dr, dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    slot = Slot(q_proj=(d, h * (dn + dr)), kv_a_proj_with_mqa=(d, r + dr), kv_b_proj=(r, h * (dn + dv)),
                o_proj=(h * dv, d))
    slot.kv_a_layernorm = NormSlot(r)
    return slot


class NoRopeAttention(nn.Module):
    """A gqa-exercise module (forward(x): causal self-attention, no positions, no cache) in the decoder."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: Any = None) -> torch.Tensor:
        return self.inner(x)


class Block(nn.Module):
    def __init__(self, attn: nn.Module, mlp: nn.Module, norm1: nn.Module, norm2: nn.Module) -> None:
        super().__init__()
        self.self_attn, self.mlp, self.input_layernorm, self.post_attention_layernorm = attn, mlp, norm1, norm2

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), positions, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


class BlockSlot(nn.Module):
    """A cut decoder layer: the reference's parameter names, until the learner's DecoderBlock replaces it."""

    def __init__(self, c: dict) -> None:
        super().__init__()
        d, f = c["hidden_size"], c["intermediate_size"]
        self.self_attn = Slot(**_attention_linears(c))
        self.mlp = Slot(gate_proj=(d, f), up_proj=(d, f), down_proj=(f, d))
        self.input_layernorm, self.post_attention_layernorm = NormSlot(d), NormSlot(d)

    def forward(self, *args: Any) -> Any:
        raise RuntimeError("the graded component was not swapped in")


class WholeBlock(nn.Module):
    """A decoder_block-exercise module (forward(x, positions)) as a decoder layer; no cache: re-run the sequence."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: Any = None) -> torch.Tensor:
        if cache is not None:
            raise RuntimeError("a DecoderBlock has no cache: generate by re-running the sequence")
        return self.inner(x, positions)


def copy_by_paths(src: nn.Module, dst: nn.Module, paths: dict[str, str]) -> None:
    """dst's parameter at each key of `paths` gets src's at its value (attribute paths); ValueError on a mismatch."""

    def get(module: nn.Module, path: str) -> torch.Tensor:
        for part in path.split("."):
            if not hasattr(module, part):
                raise ValueError(f"{type(dst).__name__} has no `{path}` (the contract's attribute path)")
            module = getattr(module, part)
        return module

    with torch.no_grad():
        for mine, theirs in paths.items():
            p, want = get(dst, mine), get(src, theirs)
            if tuple(p.shape) != tuple(want.shape):
                raise ValueError(f"{mine}: shape {tuple(p.shape)} != reference {tuple(want.shape)}")
            p.copy_(want)


class Backbone(nn.Module):
    def __init__(self, embed: nn.Embedding, layers: list, norm: nn.Module) -> None:
        super().__init__()
        self.embed_tokens, self.layers, self.norm = embed, nn.ModuleList(layers), norm


_ALIASES = {"w_gate": "gate_proj", "w_up": "up_proj", "w_down": "down_proj"}


def _canonical(name: str) -> str:
    parts = [_ALIASES.get(p, p) for p in name.split(".")]
    return ".".join(parts[-2:]) if len(parts) >= 2 else parts[-1]


def copy_weights(src: nn.Module, dst: nn.Module) -> None:
    """src's parameters into dst's, matched by name up to the exercise aliases; ValueError if they do not correspond."""
    s = {_canonical(n): p for n, p in src.named_parameters()}
    d = {_canonical(n): p for n, p in dst.named_parameters()}
    if len(s) != len(list(src.parameters())) or len(d) != len(list(dst.parameters())):
        raise ValueError("ambiguous parameter names: cannot match weights by name")
    if s.keys() != d.keys():
        raise ValueError(f"parameters do not correspond: reference has {sorted(s)}, replacement has {sorted(d)}")
    with torch.no_grad():
        for name, p in d.items():
            if p.shape != s[name].shape:
                raise ValueError(f"{name}: shape {tuple(p.shape)} != reference {tuple(s[name].shape)}")
            p.copy_(s[name])


class Decoder(nn.Module):
    """Pre-norm Llama: embed, blocks (x + attn(norm x), h + mlp(norm h)), final norm, untied head."""

    def __init__(self, c: dict, exercise: str, convention: str = "half") -> None:
        super().__init__()
        self.c, self.exercise = c, exercise
        cut = set(GRADED_PARTS.get(exercise, ()))
        d, n = c["hidden_size"], c["num_hidden_layers"]

        def norm() -> nn.Module:
            return NormSlot(d) if "RMSNorm" in cut else RMSNorm(d, c["rms_norm_eps"])

        def mlp() -> nn.Module:
            if "SwiGLU" in cut:
                f = c["intermediate_size"]
                return Slot(gate_proj=(d, f), up_proj=(d, f), down_proj=(f, d))
            return SwiGLU(d, c["intermediate_size"])

        def attention() -> nn.Module:
            if exercise == "gqa":
                return NoRopeAttention(Slot(**_attention_linears(c)))
            if exercise == "kv_cache":
                return Slot(**_attention_linears(c))
            if exercise == "mla":
                return _mla_slot(c)
            return Attention(c, convention)

        if "Block" in cut:
            layers = [BlockSlot(c) for _ in range(n)]
        else:
            layers = [Block(attention(), mlp(), norm(), norm()) for _ in range(n)]
        self.model = Backbone(nn.Embedding(c["vocab_size"], d), layers, norm())
        self.lm_head = nn.Linear(d, c["vocab_size"], bias=False)

    def swap(self, exercise: str, mod: Any) -> None:
        """Put the learner's component (from module `mod`) into every slot of the graded kind."""
        c, ref = self.c, self.lm_head.weight

        def replace(parent: nn.Module, attr: str, new: nn.Module, src: nn.Module | None = None) -> None:
            new = new.to(device=ref.device, dtype=ref.dtype)
            copy_weights(src if src is not None else getattr(parent, attr), new)
            setattr(parent, attr, new)

        d, h, h_kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        for layer in self.model.layers:
            if exercise == "rmsnorm":
                replace(layer, "input_layernorm", mod.RMSNorm(d, c["rms_norm_eps"]))
                replace(layer, "post_attention_layernorm", mod.RMSNorm(d, c["rms_norm_eps"]))
            elif exercise == "swiglu":
                replace(layer, "mlp", mod.SwiGLU(d, c["intermediate_size"]))
            elif exercise == "rope":
                layer.self_attn.rope_fn = mod.apply_rope
            elif exercise == "attention":
                layer.self_attn.attn_fn = mod.scaled_dot_product_attention
            elif exercise == "gqa":
                inner = mod.GroupedQueryAttention(d, h, h_kv)
                slot = layer.self_attn.inner
                layer.self_attn = NoRopeAttention(inner.to(device=ref.device, dtype=ref.dtype))
                copy_weights(slot, layer.self_attn.inner)
            elif exercise == "kv_cache":
                replace(layer, "self_attn", PastKVAttention(mod.CachedSelfAttention(d, h, h_kv, c["rope_theta"])))
            elif exercise == "mla":
                sizes = (c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"])
                replace(layer, "self_attn",
                        LatentPastAttention(mod.MLA(d, h, *sizes, c["rope_theta"], c["rms_norm_eps"])))
            elif exercise == "sliding_window":
                layer.self_attn = WindowAttention(layer.self_attn, mod.sliding_window_attention, c["sliding_window"])
        if exercise == "sliding_window":
            self.rolling = mod.RollingKVCache
        if exercise == "decoder_block":
            layers = self.model.layers
            for i, slot in enumerate(list(layers)):
                block = mod.DecoderBlock(d, h, h_kv, c["intermediate_size"], c["rms_norm_eps"], c["rope_theta"])
                block = block.to(device=ref.device, dtype=ref.dtype)
                copy_by_paths(slot, block, BLOCK_PATHS)
                layers[i] = WholeBlock(block)
        if exercise == "rmsnorm":
            replace(self.model, "norm", mod.RMSNorm(d, c["rms_norm_eps"]))

    def new_caches(self, batch: int, max_len: int) -> list:
        c = self.c
        if getattr(self, "rolling", None) is not None:  # sliding_window: the learner's cache, one per layer
            return [RollingSlot(self.rolling(c["sliding_window"])) for _ in range(c["num_hidden_layers"])]
        dh = c["hidden_size"] // c["num_attention_heads"]
        dtype = self.lm_head.weight.dtype
        if self.exercise == "mla":
            return [LatentCache(batch, max_len, c["kv_lora_rank"], c["qk_rope_head_dim"], dtype)
                    for _ in range(c["num_hidden_layers"])]
        return [KVCache(batch, c["num_key_value_heads"], max_len, dh, dtype) for _ in range(c["num_hidden_layers"])]

    def forward(self, ids: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        start = 0 if caches is None else caches[0].length
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.model.embed_tokens(ids)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, positions, None if caches is None else caches[i])
        return self.lm_head(self.model.norm(x))


# lora's in-model run wraps every layer's q and v projection (PEFT's default target_modules for Llama) in the
# learner's LoRALinear. The grader freezes the rest of the decoder, as get_peft_model does; the two projections
# are handed over trainable, as nn.Linear makes them, so freezing them is the learner's layer's job.
LORA_TARGETS = ("q_proj", "v_proj")
LORA_FACTORS = ("lora_A", "lora_B")


def lora_factor(layer: Any, name: str) -> torch.Tensor:
    """The tensor behind `layer.<name>`: the attribute itself, or its `.weight` (PEFT's nn.Linear layout)."""
    held = getattr(layer, name)
    return held if isinstance(held, torch.Tensor) else held.weight


def lora_run(model: nn.Module, make: Any, factors: dict, ids: torch.Tensor, returns: str, *, r: int, alpha: float,
             lr: float, names: list) -> torch.Tensor:
    """One lora in-model case on `model` (left changed): wrap, then answer `returns`.

    "logits": a forward with the grader's factors (eval mode). "step": the logits after one SGD step (lr) of
    next-token cross-entropy on `ids` in train mode, over every parameter that requires a gradient.
    "moved": int64 [values the step changed in each of the grader's own parameters, in the order of `names`...,
    adapter factors the step changed, trainable values]; the grader's tensors are watched as objects, so a
    layer that trains a copy of its base shows as an unmoved base (and fails "step").
    """
    own = dict(model.named_parameters())
    for name, p in own.items():
        if name.split(".")[-2] not in LORA_TARGETS:
            p.requires_grad_(False)
    adapters = []
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        for target in LORA_TARGETS:
            wrapped = make(getattr(attn, target), r, alpha)
            with torch.no_grad():
                for f in LORA_FACTORS:
                    t = lora_factor(wrapped, f)
                    t.copy_(factors[f"{i}.{target}.{f}"])
                    adapters.append(t)
            setattr(attn, target, wrapped)
    if returns == "logits":
        model.eval()
        with torch.no_grad():
            return model(ids)
    before = {n: p.detach().clone() for n, p in own.items()}
    adapters_before = [a.detach().clone() for a in adapters]
    model.train()
    logits = model(ids[:, :-1])
    loss = nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    trainable = [p for p in model.parameters() if p.requires_grad]
    loss.backward()
    with torch.no_grad():
        for p in trainable:
            if p.grad is not None:
                p.sub_(lr * p.grad)
    model.eval()
    if returns == "step":
        with torch.no_grad():
            return model(ids)
    moved = [int((own[n].detach() != before[n]).sum()) for n in names]
    factors_moved = sum(int(bool((a.detach() != b).any())) for a, b in zip(adapters, adapters_before, strict=True))
    return torch.tensor(moved + [factors_moved, sum(p.numel() for p in trainable)], dtype=torch.int64)


@torch.no_grad()
def greedy(model: Any, ids: torch.Tensor, new_tokens: int, *, cached: bool) -> torch.Tensor:
    """Prompt + `new_tokens` greedy tokens: prefill and one step at a time through the cache, or full recompute."""
    caches = model.new_caches(ids.shape[0], ids.shape[1] + new_tokens) if cached else None
    logits = model(ids, caches) if cached else model(ids)
    seq = ids
    for i in range(new_tokens):
        seq = torch.cat([seq, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
        if i + 1 < new_tokens:
            logits = model(seq[:, -1:], caches) if cached else model(seq)
    return seq
