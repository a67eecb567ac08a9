"""The reference MoE layer and the reference decoder block (`drill.reference.moe`, `llama_block`).

Against Hugging Face: Mixtral's sparse MoE block (renormalised top-k) and
Qwen3-MoE's (`norm_topk_prob=False`) on the same weights, and Mixtral's
`load_balancing_loss_func` on the same router logits; skipped when
transformers is missing or cannot run on this torch. Without Hugging Face:
a dense recomputation, gradients, unused experts, and the block against a
layer of the reference decoder.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import drill.reference as R

D, FF, E, K = 16, 32, 8, 2


def _weights(seed: int, e: int = E):
    g = torch.Generator().manual_seed(seed)
    router = torch.randn(e, D, generator=g) / D**0.5
    experts = [(torch.randn(FF, D, generator=g) / D**0.5, torch.randn(FF, D, generator=g) / D**0.5,
                torch.randn(D, FF, generator=g) / FF**0.5) for _ in range(e)]
    x = torch.randn(2, 5, D, generator=g)
    return x, router, experts


def _dense(x, router, experts, k, norm):
    """Every expert on every token, weighted by a (N, E) matrix that is zero off the top-k: the definition."""
    flat = x.reshape(-1, D)
    p = torch.softmax(flat @ router.T, dim=-1)
    w, idx = p.topk(k, dim=-1)
    if norm:
        w = w / w.sum(-1, keepdim=True)
    full = torch.zeros_like(p).scatter(1, idx, w)
    outs = torch.stack([F.linear(F.silu(F.linear(flat, g)) * F.linear(flat, u), dn) for g, u, dn in experts], dim=1)
    out = (outs * full[..., None]).sum(1)
    f = torch.zeros_like(p).scatter(1, idx, 1.0).mean(0)
    return out.reshape(x.shape), len(experts) * (f * p.mean(0)).sum()


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_moe_matches_the_dense_definition(norm: bool, k: int) -> None:
    x, router, experts = _weights(k)
    for impl in ("math", "fused"):
        out, aux = R.moe(x, router, experts, k, norm, impl=impl)
        want_out, want_aux = _dense(x, router, experts, k, norm)
        torch.testing.assert_close(out, want_out, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(aux, want_aux, atol=1e-6, rtol=1e-6)
        assert aux.dtype == torch.float32 and aux.dim() == 0


def test_renormalised_weights_sum_to_one_and_raw_ones_do_not() -> None:
    probs = torch.softmax(torch.randn(6, E), dim=-1)
    w, _ = R.route(probs, 3, True)
    torch.testing.assert_close(w.sum(-1), torch.ones(6))
    raw, _ = R.route(probs, 3, False)
    assert bool((raw.sum(-1) < 1).all())
    with pytest.raises(ValueError, match="top_k"):
        R.route(probs, E + 1)


def test_an_expert_without_tokens_gets_no_gradient_and_the_router_learns_through_aux() -> None:
    x, router, experts = _weights(3, e=16)  # 10 tokens, top-1 of 16: some experts get no token
    chosen = R.route(R.router_probs(x.reshape(-1, D), router), 1)[1].unique().tolist()
    idle = next(e for e in range(16) if e not in chosen)
    router.requires_grad_(True)
    params = [tuple(t.clone().requires_grad_(True) for t in e) for e in experts]
    out, aux = R.moe(x, router, params, 1)
    out.sum().backward(retain_graph=True)
    assert all(t.grad is None for t in params[idle]) and all(t.grad is not None for t in params[chosen[0]])
    router.grad = None
    aux.backward()
    assert router.grad is not None and bool(router.grad.abs().sum() > 0)


def test_router_matmul_in_the_input_dtype_softmax_in_fp32() -> None:
    x, router, _ = _weights(4)
    xb, rb = x.reshape(-1, D).bfloat16(), router.bfloat16()
    p = R.router_probs(xb, rb)
    assert p.dtype == torch.float32
    torch.testing.assert_close(p, torch.softmax(F.linear(xb, rb).float(), -1), atol=0, rtol=0)
    # router_dtype rounds the matmul as the half input would, from fp32 copies
    torch.testing.assert_close(R.router_probs(xb.float(), rb.float(), router_dtype=torch.bfloat16), p, atol=0, rtol=0)


def test_moe_module_uses_hf_names() -> None:
    m = R.MoE(D, FF, E, K)
    names = {n for n, _ in m.named_parameters()}
    assert {"gate.weight", "experts.0.gate_proj.weight", "experts.7.down_proj.weight"} <= names
    out, aux = m(torch.randn(1, 3, D))
    assert out.shape == (1, 3, D) and aux.dim() == 0


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_llama_block_is_a_layer_of_the_reference_decoder(convention: str) -> None:
    cfg = R.LlamaConfig(vocab_size=11, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                        num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5, rope_convention=convention)
    model = R.Decoder(cfg, impl="math")
    model.init_weights(generator=torch.Generator().manual_seed(0))
    layer = model.model.layers[0]
    block = R.llama_block(32, 4, 2, 48, 1e-5, 500000.0, convention, impl="math")
    block.load_state_dict(layer.state_dict())
    x = torch.randn(2, 6, 32)
    positions = torch.tensor([3, 4, 9, 20, 21, 40])
    torch.testing.assert_close(block(x, positions), layer(x, positions), atol=0, rtol=0)


# ---------------------------------------------------------------- Hugging Face


@pytest.fixture(scope="module")
def transformers():
    tf = pytest.importorskip("transformers")
    if not tf.utils.is_torch_available():  # transformers 5 disables its models on torch < 2.6
        pytest.skip(f"transformers {tf.__version__} does not support torch {torch.__version__}")
    return tf


def _load_hf_experts(block, router, experts) -> None:
    """Our per-expert (w_gate, w_up, w_down) into an HF block: fused 3-D tensors (5.x) or per-expert modules (4.x)."""
    with torch.no_grad():
        block.gate.weight.copy_(router)
        ex = block.experts
        if hasattr(ex, "gate_up_proj"):
            ex.gate_up_proj.copy_(torch.stack([torch.cat([g, u], 0) for g, u, _ in experts]))
            ex.down_proj.copy_(torch.stack([dn for _, _, dn in experts]))
        else:  # transformers 4.x: ModuleList of w1 (gate), w3 (up), w2 (down) or gate/up/down_proj
            for m, (g, u, dn) in zip(ex, experts, strict=True):
                for names, w in ((("w1", "gate_proj"), g), (("w3", "up_proj"), u), (("w2", "down_proj"), dn)):
                    getattr(m, next(n for n in names if hasattr(m, n))).weight.copy_(w)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_moe_matches_hf_mixtral_sparse_block(transformers, k: int) -> None:
    from transformers.models.mixtral import modeling_mixtral as mm

    cfg = transformers.MixtralConfig(hidden_size=D, intermediate_size=FF, num_local_experts=E, num_experts_per_tok=k,
                                     router_jitter_noise=0.0)
    block = mm.MixtralSparseMoeBlock(cfg).eval()
    x, router, experts = _weights(10 + k)
    _load_hf_experts(block, router, experts)
    with torch.no_grad():
        got = block(x)
        got = got[0] if isinstance(got, tuple) else got
        out, aux = R.moe(x, router, experts, k, True)
        logits = F.linear(x.reshape(-1, D), router)
        hf_aux = mm.load_balancing_loss_func((logits,), E, k)
    torch.testing.assert_close(out, got, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(aux, hf_aux.float(), atol=1e-6, rtol=1e-6)


def test_moe_without_renormalising_matches_hf_qwen3_moe(transformers) -> None:
    try:
        from transformers.models.qwen3_moe import modeling_qwen3_moe as qm
    except ImportError:
        pytest.skip("this transformers has no Qwen3-MoE")
    cfg = transformers.Qwen3MoeConfig(hidden_size=D, moe_intermediate_size=FF, num_experts=E, num_experts_per_tok=K,
                                      norm_topk_prob=False)
    block = qm.Qwen3MoeSparseMoeBlock(cfg).eval()
    x, router, experts = _weights(20)
    _load_hf_experts(block, router, experts)
    with torch.no_grad():
        got = block(x)
        got = got[0] if isinstance(got, tuple) else got
        out, _ = R.moe(x, router, experts, K, False)
    torch.testing.assert_close(out, got, atol=1e-5, rtol=1e-5)
