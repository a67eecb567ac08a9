"""A Llama-style decoder whose weights are interchangeable with Hugging Face's.

Pre-norm blocks: x + attn(norm(x)), then h + mlp(norm(h)); RoPE on q and k;
grouped-query attention; SwiGLU MLP; untied embeddings and LM head. The
parameter names are exactly `LlamaForCausalLM`'s, so `load_state_dict` works in
both directions and the test-suite can hold the logits against transformers'.

Pluggable for the grader's in-model checks: the constructor takes factories
for the norm, the MLP and the attention module, a RoPE function and a core
attention function; `Decoder.swap_component` replaces one of them in a built
model and copies the existing weights into the new modules. See `Decoder`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from .attention import _merge_heads, _split_heads, causal_mask, sdpa
from .config import LlamaConfig
from .kv_cache import KVCache
from .mlp import SwiGLU
from .norm import RMSNorm
from .rope import apply_rope

__all__ = ["Attention", "Block", "Decoder", "LlamaConfig", "PastKVAttention", "copy_weights", "llama_block"]

RopeFn = Callable[[Tensor, Tensor, float], Tensor]
"""(x (B, H, T, d_head), positions (T,), base) -> rotated x: the rope exercise's signature."""

AttnFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""(q, k, v, mask) -> out, all with the same head count: the attention exercise's signature."""


class DecoderAttention(Protocol):
    """What a block calls: `attn(x (B, T, d_model), positions (T,), cache) -> (B, T, d_model)`.

    `cache` is the layer's `KVCache` or None (then: plain causal self-attention).
    """

    def __call__(self, x: Tensor, positions: Tensor, cache: KVCache | None) -> Tensor: ...


class Attention(nn.Module):
    """GQA self-attention with RoPE and an optional static KV cache (HF names q/k/v/o_proj)."""

    def __init__(
        self,
        config: LlamaConfig,
        *,
        rope_fn: RopeFn | None = None,
        attn_fn: AttnFn | None = None,
        impl: str | None = None,
    ) -> None:
        super().__init__()
        d, h, h_kv, d_head = (
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        self.n_heads, self.n_kv_heads, self.rope_base = h, h_kv, config.rope_theta
        self.convention, self.impl = config.rope_convention, impl
        self.rope_fn = rope_fn
        self.attn_fn = attn_fn
        self.q_proj = nn.Linear(d, h * d_head, bias=False)
        self.k_proj = nn.Linear(d, h_kv * d_head, bias=False)
        self.v_proj = nn.Linear(d, h_kv * d_head, bias=False)
        self.o_proj = nn.Linear(h * d_head, d, bias=False)

    def _rope(self, x: Tensor, positions: Tensor) -> Tensor:
        if self.rope_fn is not None:
            return self.rope_fn(x, positions, self.rope_base)
        return apply_rope(x, positions, self.rope_base, self.convention, impl=self.impl)

    def forward(self, x: Tensor, positions: Tensor, cache: KVCache | None = None) -> Tensor:
        q = self._rope(_split_heads(self.q_proj(x), self.n_heads), positions)
        k = self._rope(_split_heads(self.k_proj(x), self.n_kv_heads), positions)
        v = _split_heads(self.v_proj(x), self.n_kv_heads)
        if cache is not None:
            k, v = cache.update(k, v)
        if self.attn_fn is None:
            out = sdpa(q, k, v, causal=True, impl=self.impl)
        else:
            # A swapped-in attention function knows nothing of GQA or caches:
            # give it full heads and the bottom-right causal mask explicitly.
            group = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            out = self.attn_fn(q, k, v, causal_mask(q.shape[2], k.shape[2], device=q.device))
        return self.o_proj(_merge_heads(out))


class PastKVAttention(nn.Module):
    """Adapts a kv_cache-exercise module to the decoder's attention protocol.

    The wrapped module has the `CachedSelfAttention` contract (exercises/README.md):
    `forward(x, past_kv=None) -> (out, (k_all, v_all))`, RoPE inside (in the file's CONVENTION),
    built with `rope_base = config.rope_theta`. Its new keys/values are written
    to the decoder's static cache, and the cache's filled views are passed back
    as `past_kv` on the next call. Its weights live under `inner.`.
    """

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: Tensor, positions: Tensor, cache: KVCache | None = None) -> Tensor:
        if cache is None:
            return self.inner(x)[0]
        t_past = cache.length
        past = None if t_past == 0 else (cache.k[:, :, :t_past], cache.v[:, :, :t_past])
        out, (k_all, v_all) = self.inner(x, past_kv=past)
        cache.update(k_all[:, :, t_past:], v_all[:, :, t_past:])
        return out


class Block(nn.Module):
    """One pre-norm decoder layer: h = x + attn(norm(x)); out = h + mlp(norm(h))."""

    def __init__(self, self_attn: nn.Module, mlp: nn.Module, input_norm: nn.Module, post_norm: nn.Module) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = input_norm
        self.post_attention_layernorm = post_norm

    def forward(self, x: Tensor, positions: Tensor, cache: KVCache | None = None) -> Tensor:
        h = x + self.self_attn(self.input_layernorm(x), positions, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


def llama_block(
    d_model: int,
    n_heads: int,
    n_kv_heads: int,
    d_ff: int,
    eps: float = 1e-6,
    rope_base: float = 10000.0,
    convention: str = "half",
    *,
    impl: str | None = None,
) -> Block:
    """One decoder layer on its own, as the `decoder_block` exercise builds it (RoPE at given positions).

    Call it as `block(x (B, T, d_model), positions (T,))`: causal by index,
    RoPE on q and k at `positions`. Parameter names are HF Llama's
    (`self_attn.q_proj.weight`, `mlp.gate_proj.weight`, `input_layernorm.weight`, ...).
    """
    cfg = LlamaConfig(
        vocab_size=1, hidden_size=d_model, intermediate_size=d_ff, num_hidden_layers=1, num_attention_heads=n_heads,
        num_key_value_heads=n_kv_heads, rope_theta=rope_base, rms_norm_eps=eps, rope_convention=convention,
    )
    return Block(Attention(cfg, impl=impl), SwiGLU(d_model, d_ff, impl=impl), RMSNorm(d_model, eps, impl=impl),
                 RMSNorm(d_model, eps, impl=impl))


class _Backbone(nn.Module):
    """Holds embed_tokens / layers / norm so the keys read `model.…` as in HF."""

    def __init__(self, embed: nn.Embedding, layers: list[Block], norm: nn.Module) -> None:
        super().__init__()
        self.embed_tokens = embed
        self.layers = nn.ModuleList(layers)
        self.norm = norm


# Names a learner's module may use for a reference parameter (exercises/README.md).
_ALIASES = {"w_gate": "gate_proj", "w_up": "up_proj", "w_down": "down_proj"}


def _canonical(name: str) -> str:
    """'inner.w_gate.weight' -> 'gate_proj.weight'; 'weight' stays 'weight'."""
    parts = [_ALIASES.get(p, p) for p in name.split(".")]
    return ".".join(parts[-2:]) if len(parts) >= 2 else parts[-1]


def copy_weights(src: nn.Module, dst: nn.Module) -> None:
    """Copy src's parameters into dst's, matched by name up to known aliases.

    Every parameter on each side must find exactly one partner of the same
    shape, else ValueError: a half-copied module would grade the wrong thing.
    """
    src_params = {_canonical(n): p for n, p in src.named_parameters()}
    dst_params = {_canonical(n): p for n, p in dst.named_parameters()}
    if len(src_params) != len(list(src.parameters())) or len(dst_params) != len(list(dst.parameters())):
        raise ValueError("ambiguous parameter names: cannot match weights by name")
    if src_params.keys() != dst_params.keys():
        raise ValueError(
            f"parameters do not correspond: reference has {sorted(src_params)}, replacement has {sorted(dst_params)}"
        )
    with torch.no_grad():
        for name, p in dst_params.items():
            if p.shape != src_params[name].shape:
                raise ValueError(f"{name}: shape {tuple(p.shape)} != reference {tuple(src_params[name].shape)}")
            p.copy_(src_params[name])


class Decoder(nn.Module):
    """Llama decoder with HF-identical parameter names, a static KV cache and greedy `generate`.

    Swappable parts (all optional; defaults are the reference's own):
    - `norm_factory(dim, eps) -> nn.Module` for every RMSNorm (two per layer + final);
    - `mlp_factory(d_model, d_ff) -> nn.Module` for each layer's MLP;
    - `attention_factory(config, layer_idx) -> nn.Module` following `DecoderAttention`
      (wrap a kv_cache-exercise module in `PastKVAttention`);
    - `rope_fn(x, positions, base)` and `attn_fn(q, k, v, mask)` used inside the
      default attention module.
    `impl` ("fused"/"math"/None) is passed to every default component.
    """

    def __init__(
        self,
        config: LlamaConfig,
        *,
        norm_factory: Callable[[int, float], nn.Module] | None = None,
        mlp_factory: Callable[[int, int], nn.Module] | None = None,
        attention_factory: Callable[[LlamaConfig, int], nn.Module] | None = None,
        rope_fn: RopeFn | None = None,
        attn_fn: AttnFn | None = None,
        impl: str | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.impl = impl
        norm_factory = norm_factory or (lambda dim, eps: RMSNorm(dim, eps, impl=impl))
        mlp_factory = mlp_factory or (lambda d, d_ff: SwiGLU(d, d_ff, impl=impl))
        attention_factory = attention_factory or (
            lambda cfg, i: Attention(cfg, rope_fn=rope_fn, attn_fn=attn_fn, impl=impl)
        )
        c = config
        layers = [
            Block(
                attention_factory(c, i),
                mlp_factory(c.hidden_size, c.intermediate_size),
                norm_factory(c.hidden_size, c.rms_norm_eps),
                norm_factory(c.hidden_size, c.rms_norm_eps),
            )
            for i in range(c.num_hidden_layers)
        ]
        self.model = _Backbone(
            nn.Embedding(c.vocab_size, c.hidden_size), layers, norm_factory(c.hidden_size, c.rms_norm_eps)
        )
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.init_weights()

    def init_weights(self, std: float | None = None, *, generator: torch.Generator | None = None) -> None:
        """Normal(0, std) for embeddings and projections, std = 1/sqrt(hidden) by default; norms to 1.

        1/sqrt(hidden) (not HF's 0.02) keeps q.k large enough that a RoPE or
        masking bug changes the logits visibly in tests.
        """
        std = 1.0 / math.sqrt(self.config.hidden_size) if std is None else std
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, std, generator=generator)

    def new_caches(
        self, batch: int, max_len: int, *, dtype: torch.dtype | None = None, device: torch.device | None = None
    ) -> list[KVCache]:
        """One empty static KV cache per layer, in the model's dtype and device by default."""
        ref = self.model.embed_tokens.weight
        c = self.config
        return [
            KVCache(batch, c.num_key_value_heads, max_len, c.head_dim, dtype=dtype or ref.dtype,
                    device=device or ref.device)
            for _ in range(c.num_hidden_layers)
        ]

    def _check_ids(self, input_ids: Tensor) -> None:
        if input_ids.dim() != 2 or input_ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"input_ids must be an integer (B, T) tensor, got shape {tuple(input_ids.shape)} dtype "
                f"{input_ids.dtype}"
            )
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size):
            bad = int(input_ids.min()) if int(input_ids.min()) < 0 else int(input_ids.max())
            raise ValueError(f"token id {bad} out of range for vocab_size={self.config.vocab_size}")

    def forward(self, input_ids: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        """Logits (B, T, vocab) for `input_ids` (B, T).

        Without caches: a full causal pass from position 0. With caches (from
        `new_caches`): the tokens continue the cached sequence, starting at
        position `caches[0].length`; works for prefill, one-token decode and
        chunks of any size, and appends to the caches.
        """
        self._check_ids(input_ids)
        start = 0
        if caches is not None:
            if len(caches) != self.config.num_hidden_layers:
                raise ValueError(f"need {self.config.num_hidden_layers} caches, got {len(caches)}")
            lengths = {c.length for c in caches}
            if len(lengths) != 1:
                raise ValueError(f"caches disagree on length: {sorted(lengths)}")
            start = lengths.pop()
        positions = torch.arange(start, start + input_ids.shape[1], device=input_ids.device)
        x = self.model.embed_tokens(input_ids)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, positions, None if caches is None else caches[i])
        return self.lm_head(self.model.norm(x))

    @torch.no_grad()
    def generate(self, input_ids: Tensor, max_new_tokens: int) -> Tensor:
        """Greedy decoding: one prefill pass, then one token per step through the KV cache.

        Returns (B, T + max_new_tokens): the prompt followed by the new tokens.
        """
        self._check_ids(input_ids)
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got max_new_tokens={max_new_tokens}")
        if max_new_tokens == 0:
            return input_ids.clone()
        caches = self.new_caches(input_ids.shape[0], input_ids.shape[1] + max_new_tokens)
        logits = self(input_ids, caches)
        out = [input_ids]
        for step in range(max_new_tokens):
            next_id = logits[:, -1].argmax(dim=-1, keepdim=True)
            out.append(next_id)
            if step + 1 < max_new_tokens:
                logits = self(next_id, caches)
        return torch.cat(out, dim=1)

    # --- in-model checks ---------------------------------------------------

    def norms(self) -> list[tuple[nn.Module, str]]:
        """(parent, attribute) of every norm module, in order."""
        spots: list[tuple[nn.Module, str]] = []
        for layer in self.model.layers:
            spots += [(layer, "input_layernorm"), (layer, "post_attention_layernorm")]
        return spots + [(self.model, "norm")]

    def swap_component(self, kind: str, new: Callable[..., Any]) -> Decoder:
        """Replace one kind of component in place, keeping the current weights; returns self.

        kind "norm": `new(dim, eps)` replaces every norm; "mlp": `new(d_model, d_ff)`
        each MLP; "attention": `new(config, layer_idx)` each attention module;
        weights are copied into the new modules (names matched up to the
        exercise aliases w_gate/w_up/w_down), on the same device and dtype.
        kind "rope": `new(x, positions, base)`; "attn_fn": `new(q, k, v, mask)`;
        these two are installed into the reference attention modules.
        """
        c = self.config
        ref = self.lm_head.weight

        def _replace(parent: nn.Module, attr: str, module: nn.Module) -> None:
            module = module.to(device=ref.device, dtype=ref.dtype)
            copy_weights(getattr(parent, attr), module)
            setattr(parent, attr, module)

        if kind == "norm":
            for parent, attr in self.norms():
                _replace(parent, attr, new(c.hidden_size, c.rms_norm_eps))
        elif kind == "mlp":
            for layer in self.model.layers:
                _replace(layer, "mlp", new(c.hidden_size, c.intermediate_size))
        elif kind == "attention":
            for i, layer in enumerate(self.model.layers):
                _replace(layer, "self_attn", new(c, i))
        elif kind in ("rope", "attn_fn"):
            for layer in self.model.layers:
                if not isinstance(layer.self_attn, Attention):
                    raise ValueError(
                        f"cannot set {kind} on a swapped attention module {type(layer.self_attn).__name__}")
                setattr(layer.self_attn, "rope_fn" if kind == "rope" else "attn_fn", new)
        else:
            raise ValueError(f"unknown component kind {kind!r}: expected norm, mlp, attention, rope or attn_fn")
        return self
