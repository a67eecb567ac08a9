"""The reference LayerNorm and cross-entropy against Hugging Face's own implementations.

transformers has a hand-written LayerNorm (DebertaLayerNorm: weight and
bias, eps inside the root, computed in fp32) and its own loss code: the
causal-LM loss (`ForCausalLMLoss`, flattening (B, T, V) logits over the last
axis, ignore_index -100) and the Trainer's label smoothing (`LabelSmoother`,
whose uniform term is the mean over all V classes of the kept positions) —
the definitions the contract follows. Skipped when transformers is missing
or cannot run on this torch.
"""

from __future__ import annotations

import pytest
import torch

import drill.reference as R

transformers = pytest.importorskip("transformers")
if not transformers.utils.is_torch_available():  # transformers 5 disables its models on torch < 2.6
    pytest.skip(f"transformers {transformers.__version__} does not support torch {torch.__version__}",
                allow_module_level=True)

IMPLS = ["fused", "math"]


def _draw(seed: int, *shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale + shift


def _labels(seed: int, shape: tuple[int, ...], v: int, ignore: int) -> torch.Tensor:
    t = torch.randint(0, v, shape, generator=torch.Generator().manual_seed(seed))
    t[..., 1::3] = ignore
    return t


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shift", [0.0, 3.0, 100.0])
def test_layer_norm_matches_deberta_layer_norm(impl: str, shift: float) -> None:
    try:
        from transformers.models.deberta.modeling_deberta import DebertaLayerNorm
    except ImportError as exc:  # a trimmed transformers install
        pytest.skip(f"DebertaLayerNorm unavailable: {exc}")
    d = 48
    hf = DebertaLayerNorm(d, eps=1e-5)
    with torch.no_grad():
        hf.weight.copy_(_draw(1, d, scale=0.5, shift=1.0))
        hf.bias.copy_(_draw(2, d))
    x = _draw(3, 2, 5, d, scale=1.0, shift=shift)
    want = hf(x)
    got = R.layer_norm(x, hf.weight, hf.bias, 1e-5, impl=impl)
    # fp32 rounding of the mean (~1e-7 x shift) moves every output of a row by that much over the spread
    torch.testing.assert_close(got, want, atol=1e-5 + 1e-6 * shift, rtol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("ignore", [-100, 0])
def test_cross_entropy_matches_the_causal_lm_loss(impl: str, ignore: int) -> None:
    from transformers.loss.loss_utils import ForCausalLMLoss

    b, t, v = 2, 7, 33
    logits = _draw(4, b, t, v, scale=3.0)
    labels = _labels(5, (b, t), v, ignore)
    # shift_labels given: HF then compares position i with labels[i], as the contract does
    want = ForCausalLMLoss(logits, None, v, ignore_index=ignore, shift_labels=labels)
    got = R.cross_entropy(logits, labels, ignore, 0.0, impl=impl)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("epsilon", [0.1, 0.3])
def test_cross_entropy_smoothing_matches_the_trainers_label_smoother(impl: str, epsilon: float) -> None:
    from transformers.trainer_pt_utils import LabelSmoother

    b, t, v = 3, 5, 21
    logits = _draw(6, b, t, v, scale=2.0)
    labels = _labels(7, (b, t), v, -100)
    want = LabelSmoother(epsilon=epsilon)({"logits": logits}, labels)
    got = R.cross_entropy(logits, labels, -100, epsilon, impl=impl)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
