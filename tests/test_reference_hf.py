"""The reference decoder against transformers' LlamaForCausalLM: same weights, same logits.

Tiny config with GQA (4 heads, 2 kv heads) and rope_theta = 500000, weights
drawn with std 1/sqrt(hidden) (HF's 0.02 makes attention nearly uniform and
hides RoPE bugs) and random norm weights. fp32, built offline.
"""

from __future__ import annotations

import math

import pytest
import torch

import drill.reference as R

transformers = pytest.importorskip("transformers")
if not transformers.utils.is_torch_available():  # transformers 5 disables its models on torch < 2.6
    pytest.skip(f"transformers {transformers.__version__} does not support torch {torch.__version__}",
                allow_module_level=True)

HIDDEN = 64
HF_KW = dict(
    vocab_size=97,
    hidden_size=HIDDEN,
    intermediate_size=R.ffn_hidden_dim(HIDDEN, 16),
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
)
THETA = 500000.0


def hf_model(seed: int):
    cfg = transformers.LlamaConfig(
        **HF_KW,
        rope_theta=THETA,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 1 / math.sqrt(HIDDEN))
    return model


@pytest.fixture(scope="module")
def hf():
    return hf_model(seed=0)


@pytest.fixture(scope="module")
def input_ids():
    return torch.randint(0, HF_KW["vocab_size"], (2, 13), generator=torch.Generator().manual_seed(3))


def ours(impl=None) -> R.Decoder:
    cfg = R.LlamaConfig(**HF_KW, rope_theta=THETA)
    return R.Decoder(cfg, impl=impl).eval()


def test_config_round_trip(hf):
    assert R.LlamaConfig.from_hf(hf.config) == R.LlamaConfig(**HF_KW, rope_theta=THETA)


@pytest.mark.parametrize("impl", ["fused", "math"])
def test_hf_weights_into_reference_give_hf_logits(hf, input_ids, impl):
    model = ours(impl=impl)
    model.load_state_dict(hf.state_dict(), strict=True)
    with torch.no_grad():
        expected = hf(input_ids).logits
        got = model(input_ids)
    assert expected.abs().max() > 1.0  # logits of a useful size, not all ~0
    assert (got - expected).abs().max().item() < 1e-5


def test_reference_weights_into_hf_give_reference_logits(input_ids):
    model = ours()
    model.init_weights(generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    target = hf_model(seed=1)
    target.load_state_dict(model.state_dict(), strict=True)
    with torch.no_grad():
        assert (target(input_ids).logits - model(input_ids)).abs().max().item() < 1e-5


def test_greedy_generate_matches_hf(hf, input_ids):
    model = ours()
    model.load_state_dict(hf.state_dict())
    prompt = input_ids[:, :6]
    with torch.no_grad():
        expected = hf.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    got = model.generate(prompt, 8)
    assert got.shape == (2, 14)
    assert torch.equal(got, expected)


def test_wrong_rope_convention_is_caught(hf, input_ids):
    """The comparison has teeth: Meta's pairing on HF weights changes the logits."""
    cfg = R.LlamaConfig(**HF_KW, rope_theta=THETA, rope_convention="interleaved")
    model = R.Decoder(cfg).eval()
    model.load_state_dict(hf.state_dict())
    with torch.no_grad():
        assert (model(input_ids) - hf(input_ids).logits).abs().max().item() > 1e-2
