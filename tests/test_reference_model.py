"""The decoder: KV-cache call patterns, pluggable components, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import drill.reference as R

IMPLS = ["fused", "math"]
CFG = dict(
    vocab_size=61,
    hidden_size=32,
    intermediate_size=88,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
)


def make_model(impl=None, seed=0, **overrides) -> R.Decoder:
    torch.manual_seed(seed)
    model = R.Decoder(R.LlamaConfig(**{**CFG, **overrides}), impl=impl)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)  # not ones: a norm that ignores its weight must show
    return model.eval()


def ids(b=2, t=11, seed=1):
    return torch.randint(0, CFG["vocab_size"], (b, t), generator=torch.Generator().manual_seed(seed))


def max_diff(a, b):
    return (a.double() - b.double()).abs().max().item()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("split", [[11], [5, 1, 1, 1, 1, 1, 1], [4, 4, 3], [1] * 11, [2, 9]])
def test_cache_any_split_equals_full_forward(impl, split):
    model, x = make_model(impl), ids()
    full = model(x)
    caches = model.new_caches(2, 16)
    outs, start = [], 0
    with torch.no_grad():
        for n in split:
            outs.append(model(x[:, start : start + n], caches))
            start += n
    assert caches[0].length == 11
    assert max_diff(torch.cat(outs, 1), full) < 1e-5


def test_fused_and_math_decoders_agree():
    x = ids()
    assert max_diff(make_model("fused")(x), make_model("math")(x)) < 1e-5


def test_generate_is_greedy_argmax_of_full_forward():
    model, prompt = make_model(), ids(t=5)
    out = model.generate(prompt, 6)
    assert out.shape == (2, 11) and torch.equal(out[:, :5], prompt)
    # Recompute each step without any cache.
    seq = prompt
    for _ in range(6):
        seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)
    assert torch.equal(model.generate(prompt, 0), prompt)


def test_logits_depend_on_rope_convention_and_theta():
    """Guards the HF test's power: the model is sensitive to the RoPE details."""
    x = ids()
    base = make_model()(x)
    assert max_diff(make_model(rope_convention="interleaved")(x), base) > 1e-2
    assert max_diff(make_model(rope_theta=10000.0)(x), base) > 1e-2


def test_state_dict_keys_are_hf_llama_names():
    keys = set(make_model().state_dict())
    expected = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for i in range(2):
        p = f"model.layers.{i}."
        expected |= {p + f"self_attn.{n}_proj.weight" for n in "qkvo"}
        expected |= {p + f"mlp.{n}_proj.weight" for n in ("gate", "up", "down")}
        expected |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
    assert keys == expected


# --- swapping components, as the grader's in-model check does ----------------


class LearnerSwiGLU(nn.Module):
    """Exercise naming (w_gate/w_up/w_down) and its own formulation."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_gate = nn.Linear(d_model, d_ff, bias=False)
        self.w_up = nn.Linear(d_model, d_ff, bias=False)
        self.w_down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        g = self.w_gate(x)
        return self.w_down(g * torch.sigmoid(g) * self.w_up(x))


class LearnerRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LearnerCachedAttention(nn.Module):
    """The kv_cache exercise contract, via the reference functional API."""

    def __init__(self, d_model, n_heads, n_kv_heads, rope_base=10000.0):
        super().__init__()
        d_head = d_model // n_heads
        self.n_heads, self.n_kv_heads, self.rope_base = n_heads, n_kv_heads, rope_base
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=False)
        self.o_proj = nn.Linear(n_heads * d_head, d_model, bias=False)

    def forward(self, x, past_kv=None):
        w = (self.q_proj.weight, self.k_proj.weight, self.v_proj.weight, self.o_proj.weight)
        return R.grouped_query_attention(
            x, *w, self.n_heads, self.n_kv_heads, rope_base=self.rope_base, past_kv=past_kv, impl="math"
        )


def naive_attention_fn(q, k, v, mask):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v


SWAPS = {
    "mlp": lambda c: LearnerSwiGLU,
    "norm": lambda c: LearnerRMSNorm,
    "attention": lambda c: lambda cfg, i: R.PastKVAttention(
        LearnerCachedAttention(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.rope_theta)
    ),
    "rope": lambda c: lambda x, pos, base: R.apply_rope(x, pos, base, impl="math"),
    "attn_fn": lambda c: naive_attention_fn,
}


@pytest.mark.parametrize("kind", sorted(SWAPS))
def test_swapped_correct_component_keeps_logits_and_generation(kind):
    x = ids()
    model = make_model()
    expected_logits, expected_gen = model(x), model.generate(x[:, :4], 5)
    model.swap_component(kind, SWAPS[kind](model.config))
    assert max_diff(model(x), expected_logits) < 1e-5
    assert torch.equal(model.generate(x[:, :4], 5), expected_gen)


def test_swapped_buggy_component_changes_logits():
    x = ids()
    model = make_model()
    expected = model(x)
    model.swap_component("rope", lambda t, pos, base: R.apply_rope(t, pos, base, "interleaved"))
    assert max_diff(model(x), expected) > 1e-2


def test_constructor_factories_are_used():
    made = []

    def norm_factory(dim, eps):
        made.append(eps)
        return LearnerRMSNorm(dim, eps)

    model = R.Decoder(R.LlamaConfig(**CFG), norm_factory=norm_factory, mlp_factory=LearnerSwiGLU)
    assert made == [1e-5] * 5
    assert isinstance(model.model.layers[1].mlp, LearnerSwiGLU)


def test_swap_with_mismatched_parameters_is_refused():
    class NoUp(nn.Module):
        def __init__(self, d, d_ff):
            super().__init__()
            self.gate_proj = nn.Linear(d, d_ff, bias=False)
            self.down_proj = nn.Linear(d_ff, d, bias=False)

    with pytest.raises(ValueError, match="up_proj"):
        make_model().swap_component("mlp", NoUp)
    with pytest.raises(ValueError, match="'bogus'"):
        make_model().swap_component("bogus", NoUp)


# --- KV cache ----------------------------------------------------------------


def test_kv_cache_update_views_reset_and_overflow():
    cache = R.KVCache(1, 2, 5, 4)
    k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    k_view, v_view = cache.update(k, v)
    assert cache.length == 3 and torch.equal(k_view, k) and torch.equal(v_view, v)
    k_view, _ = cache.update(k[:, :, :2], v[:, :, :2])
    assert k_view.shape == (1, 2, 5, 4) and torch.equal(k_view[:, :, 3:], k[:, :, :2])
    assert cache.k.data_ptr() == k_view.data_ptr()  # a view into the static buffer, no copy
    with pytest.raises(ValueError, match="max_len=5"):
        cache.update(k[:, :, :1], v[:, :, :1])
    assert cache.length == 5  # the failed update wrote nothing
    cache.reset()
    assert cache.length == 0 and cache.update(k, v)[0].shape[2] == 3


# --- bad input: ValueError naming the bad value --------------------------------


BAD_CONFIGS = {
    "heads do not divide d_model": (dict(num_attention_heads=5, num_key_value_heads=5), "num_attention_heads=5"),
    "kv heads do not divide heads": (dict(num_key_value_heads=3), "num_key_value_heads=3"),
    "odd head dim": (dict(hidden_size=36, num_attention_heads=4), "head_dim=9"),
    "eps zero": (dict(rms_norm_eps=0.0), "rms_norm_eps=0.0"),
    "eps negative": (dict(rms_norm_eps=-1e-6), "rms_norm_eps=-1e-06"),
    "convention": (dict(rope_convention="neox"), "'neox'"),
    "theta": (dict(rope_theta=-1.0), "rope_theta=-1.0"),
    "zero layers": (dict(num_hidden_layers=0), "num_hidden_layers=0"),
    "float size": (dict(hidden_size=32.0), "hidden_size=32.0"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_raises_value_error_naming_value(case):
    overrides, needle = BAD_CONFIGS[case]
    with pytest.raises(ValueError) as info:
        R.LlamaConfig(**{**CFG, **overrides})
    assert needle in str(info.value)


x4 = torch.zeros(1, 4, 3, 8)
BAD_CALLS = {
    "rope odd dim": (lambda: R.apply_rope(torch.zeros(1, 1, 2, 7), torch.arange(2)), "d_head=7"),
    "rope convention": (lambda: R.apply_rope(x4, torch.arange(3), convention="gptj"), "'gptj'"),
    "rope positions": (lambda: R.apply_rope(x4, torch.arange(4)), "(4,)"),
    "rope float positions": (lambda: R.rope_angles(torch.tensor([0.5]), 8), "float32"),
    "rms eps": (lambda: R.rms_norm(torch.zeros(2, 4), torch.ones(4), 0.0), "eps=0.0"),
    "rms module eps": (lambda: R.RMSNorm(4, eps=-1.0), "eps=-1.0"),
    "sdpa gqa": (lambda: R.sdpa(x4, torch.zeros(1, 3, 3, 8), torch.zeros(1, 3, 3, 8)), "Hkv=3"),
    "sdpa mask dtype": (lambda: R.sdpa(x4, x4, x4, torch.ones(3, 3)), "torch.float32"),
    "sdpa mask shape": (lambda: R.sdpa(x4, x4, x4, torch.ones(3, 5, dtype=torch.bool)), "(3, 5)"),
    "mha heads": (lambda: R.multi_head_attention(torch.zeros(1, 2, 10), *[torch.zeros(10, 10)] * 4, n_heads=3),
                  "n_heads=3"),
    "gqa kv heads": (
        lambda: R.grouped_query_attention(torch.zeros(1, 2, 8), *[torch.zeros(8, 8)] * 4, n_heads=4, n_kv_heads=3),
        "n_kv_heads=3",
    ),
    "impl name": (lambda: R.set_impl("triton"), "'triton'"),
    "ffn": (lambda: R.ffn_hidden_dim(0), "d_model=0"),
    "token id": (lambda: make_model()(torch.tensor([[0, 61]])), "61"),
    "cache dtype": (lambda: R.KVCache(1, 1, 4, 8).update(torch.zeros(1, 1, 1, 8, dtype=torch.float16),
                                                         torch.zeros(1, 1, 1, 8, dtype=torch.float16)), "float16"),
    "decoder cache overflow": (lambda: make_model()(ids(t=5), make_model().new_caches(2, 4)), "max_len=4"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_call_raises_value_error_naming_value(case):
    fn, needle = BAD_CALLS[case]
    with pytest.raises(ValueError) as info:
        fn()
    assert needle in str(info.value)
    assert R.get_impl() == "fused"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_decoder_with_cache_is_finite_and_close(dtype):
    model, x = make_model(), ids()
    ref = model(x)
    half = make_model().to(dtype)
    caches = half.new_caches(2, 11)
    assert caches[0].k.dtype == dtype
    with torch.no_grad():
        out = torch.cat([half(x[:, :8], caches), half(x[:, 8:], caches)], 1)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert max_diff(out, ref) < 0.1 * ref.abs().max().item()
