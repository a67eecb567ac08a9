"""Spot-bug snippets do what their cards say: the code as written shows the symptom, the fix removes it.

A spot-bug card is never run by `drill quiz` (only parsed), so nothing else
checks that its mistake is real. Here each snippet is executed twice, as
written and with the card's `fix` applied, on a small case that shows the
prompt's symptom; both runs are compared with a reference. Cards whose code
needs a process group or a model (the training loops) are left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from drill.paths import questions_dir
from drill.quiz.kinds.spot_bug import SpotBugQuestion
from drill.quiz.loader import scan

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _namespaces(card: SpotBugQuestion) -> tuple[dict, dict]:
    """Execute the snippet as written and with the fix in place (the fix line takes the bug line's indent)."""
    lines = card.code.splitlines()
    i = card.bug_line - 1
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    fix = [] if card.fix.startswith("# delete this line") else [indent + line for line in card.fix.splitlines()]
    out = []
    for code in (lines, lines[:i] + fix + lines[i + 1 :]):
        ns: dict = {}
        exec(compile("\n".join(code), card.id, "exec"), ns)  # the bank's own snippets, not learner input
        out.append(ns)
    return out[0], out[1]


def _flash(bug: dict, fixed: dict) -> None:
    q, ks, vs = torch.randn(4, 8), [torch.randn(3, 8) for _ in range(3)], [torch.randn(3, 8) for _ in range(3)]
    ref = torch.softmax(q @ torch.cat(ks).T * 0.3, -1) @ torch.cat(vs)
    assert bug["flash_rows"](q, ks, vs, 0.3).isnan().all()
    torch.testing.assert_close(fixed["flash_rows"](q, ks, vs, 0.3), ref)


def _gqa(bug: dict, fixed: dict) -> None:
    q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    assert bug["gqa_attention"](q, k, v)[..., 0, :].isnan().all()
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    ref = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
    torch.testing.assert_close(fixed["gqa_attention"](q, k, v), ref)


def _top_p(bug: dict, fixed: dict) -> None:
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = [int((ns["top_p_filter"](logits, 0.9) > -math.inf).sum()) for ns in (bug, fixed)]
    assert kept == [2, 3]


def _min_p(bug: dict, fixed: dict) -> None:
    logits = torch.tensor([[0.08, 0.07, 0.06] + [0.79 / 20] * 20]).log()
    kept = [int((ns["min_p_filter"](logits, 0.1) > 0).sum()) for ns in (bug, fixed)]
    assert kept == [1, 23]


def _window(bug: dict, fixed: dict) -> None:
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    assert torch.equal(bug["window_mask"](6, 2), causal)
    assert torch.equal(fixed["window_mask"](6, 2), causal & ~causal.tril(-2))


def _sinks(bug: dict, fixed: dict) -> None:
    cache = torch.arange(2000.0).view(1, 1, 2000, 1)
    kept = [ns["evict"](cache, cache)[0][0, 0, :, 0].tolist() for ns in (bug, fixed)]
    assert kept[0][:4] != [0.0, 1.0, 2.0, 3.0]
    assert kept[1] == [0.0, 1.0, 2.0, 3.0] + [float(t) for t in range(980, 2000)]


def _bpe_merge(bug: dict, fixed: dict) -> None:
    assert "".join(bug["apply_merge"](["l", "o", "w"], ("l", "o"))) == "loow"
    assert fixed["apply_merge"](["l", "o", "w"], ("l", "o")) == ["lo", "w"]


def _pair_count(bug: dict, fixed: dict) -> None:
    words = {("t", "h", "e"): 1000, ("x", "y", "z"): 1, ("x", "y", "q"): 1}
    assert bug["most_frequent_pair"](words) == ("x", "y")
    assert fixed["most_frequent_pair"](words) in {("t", "h"), ("h", "e")}


def _params(bug: dict, fixed: dict) -> None:
    llama3_8b = (128256, 4096, 32, 32, 8, 14336)
    assert round(bug["llama_params"](*llama3_8b) / 1e9, 2) == 8.84  # what the card says it prints
    assert fixed["llama_params"](*llama3_8b) == 8_030_261_248


def _mfu(bug: dict, fixed: dict) -> None:
    args = (8.03e9, 8000, 1, 989e12)
    assert round(100 * bug["training_mfu"](*args)) == 13 and round(100 * fixed["training_mfu"](*args)) == 39


def _chunk(bug: dict, fixed: dict) -> None:
    q, k, v = torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for ns, matches in ((bug, False), (fixed, True)):
        cache: dict = {}
        first = ns["attend_with_cache"](q[..., :3, :], k[..., :3, :], v[..., :3, :], cache)
        second = ns["attend_with_cache"](q[..., 3:, :], k[..., 3:, :], v[..., 3:, :], cache)
        assert torch.allclose(torch.cat([first, second], -2), ref, atol=1e-5) is matches


def _log_softmax(bug: dict, fixed: dict) -> None:
    logits, targets = torch.tensor([[0.0, 200.0], [1.0, 2.0]]), torch.tensor([0, 1])
    assert bug["cross_entropy"](logits, targets).isinf()
    torch.testing.assert_close(fixed["cross_entropy"](logits, targets), F.cross_entropy(logits, targets))


def _smoothing(bug: dict, fixed: dict) -> None:
    logits, targets = torch.randn(5, 7), torch.randint(0, 7, (5,))
    ref = F.cross_entropy(logits, targets, label_smoothing=0.1)
    assert bug["smoothed_cross_entropy"](logits, targets) > ref
    torch.testing.assert_close(fixed["smoothed_cross_entropy"](logits, targets), ref)


def _aux(bug: dict, fixed: dict) -> None:
    for n_experts in (8, 64):
        balanced = torch.zeros(n_experts * 4, n_experts)
        balanced[torch.arange(n_experts * 4), torch.arange(n_experts * 4) % n_experts] = 5.0  # one favourite each
        assert fixed["load_balancing_loss"](balanced, 1).item() == pytest.approx(1.0, rel=0.05)
        assert bug["load_balancing_loss"](balanced, 1).item() == pytest.approx(1.0 / n_experts, rel=0.05)


def _bpb(bug: dict, fixed: dict) -> None:
    text = "नमस्ते दुनिया"  # Devanagari: 3 UTF-8 bytes per code point
    ratio = bug["bits_per_byte"]([1.0] * 5, text) / fixed["bits_per_byte"]([1.0] * 5, text)
    assert ratio == pytest.approx(len(text.encode("utf-8")) / len(text)) and ratio > 2.5


def _pooled(bug: dict, fixed: dict) -> None:
    results = [(10, 10), (10, 0)]
    assert bug["benchmark_pass_at_k"](results, 10) > 0.99
    assert fixed["benchmark_pass_at_k"](results, 10) == 0.5


def _prefix_hash(bug: dict, fixed: dict) -> None:
    a, b = list(range(48)), [99] * 16 + list(range(16, 48))  # differ in block 0 only
    assert bug["block_hashes"](a)[2] == bug["block_hashes"](b)[2]
    assert fixed["block_hashes"](a)[2] != fixed["block_hashes"](b)[2]


def _refcount(bug: dict, fixed: dict) -> None:
    for ns, freed_while_shared in ((bug, True), (fixed, False)):
        pool = ns["BlockPool"](4)
        block = pool.allocate()
        pool.share(block)
        pool.release(block)
        assert (block in pool.free) is freed_while_shared


def _slot(bug: dict, fixed: dict) -> None:
    class Pool:
        def __init__(self) -> None:
            self.k, self.v, self.next = [None] * 128, [None] * 128, iter([3, 4])

        def allocate(self) -> int:
            return next(self.next)

    class Seq:
        def __init__(self) -> None:
            self.block_table: list[int] = []
            self.length = 0

    for ns, overlaps in ((bug, True), (fixed, False)):
        pool, seq = Pool(), Seq()
        for pos in range(20):
            ns["append_kv"](seq, ("k", pos), ("v", pos), pool, block_size=16)
        stored = [x for x in pool.k if x is not None]
        assert (len(stored) < 20) is overlaps


# the ten snippets rewritten as real code for issue 28 (they were one or two lines before)
def _fp16_fill(bug: dict, fixed: dict) -> None:
    q, allowed = torch.randn(1, 2, 4, 8), torch.ones(4, 4, dtype=torch.bool).tril()
    with pytest.raises(RuntimeError):
        bug["masked_attention"](q.half(), q.half(), q.half(), allowed)
    fixed["masked_attention"](q.half(), q.half(), q.half(), allowed)  # the fix fits fp16
    ref = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.testing.assert_close(fixed["masked_attention"](q, q, q, allowed), ref)


def _no_max(bug: dict, fixed: dict) -> None:
    x = torch.tensor([[1000.0, 999.0]])
    assert bug["softmax"](x).isnan().all()
    torch.testing.assert_close(fixed["softmax"](x), torch.softmax(x, -1))


def _split_heads(bug: dict, fixed: dict) -> None:
    x = torch.arange(24.0).view(1, 3, 8)
    ref = x.view(1, 3, 2, 4).transpose(1, 2)  # head h owns features [4h, 4h + 4)
    assert not torch.equal(bug["split_heads"](x, 2), ref)
    assert torch.equal(fixed["split_heads"](x, 2), ref)


def _merge_heads(bug: dict, fixed: dict) -> None:
    h = torch.randn(1, 2, 3, 4)
    ref = h.transpose(1, 2).reshape(1, 3, 8)
    assert not torch.equal(bug["merge_heads"](h), ref)
    assert torch.equal(fixed["merge_heads"](h), ref)


def _rope_exponent(bug: dict, fixed: dict) -> None:
    slowest = [ns["rope_inverse_frequencies"](128)[-1].item() for ns in (bug, fixed)]
    assert slowest[0] > 0.01 and slowest[1] == pytest.approx(10000 ** (-126 / 128))


def _rope_values(bug: dict, fixed: dict) -> None:
    x, cos, sin = torch.randn(1, 1, 3, 4), torch.randn(3, 4), torch.randn(3, 4)
    assert not torch.equal(bug["apply_rotary"](x, x, x, cos, sin)[2], x)
    assert torch.equal(fixed["apply_rotary"](x, x, x, cos, sin)[2], x)


def _ln_variance(bug: dict, fixed: dict) -> None:
    x = torch.randn(3, 4)
    ref = F.layer_norm(x, (4,))
    assert not torch.allclose(bug["LayerNorm"](4)(x), ref, atol=1e-3)
    torch.testing.assert_close(fixed["LayerNorm"](4)(x), ref)


def _ffn_rounding(bug: dict, fixed: dict) -> None:
    assert (bug["ffn_hidden_dim"](4096), fixed["ffn_hidden_dim"](4096)) == (10_752, 11_008)


def _gqa_tiles(bug: dict, fixed: dict) -> None:
    k = torch.randn(1, 2, 3, 4)
    assert not torch.equal(bug["expand_kv"](k, 4), k.repeat_interleave(2, 1))
    assert torch.equal(fixed["expand_kv"](k, 4), k.repeat_interleave(2, 1))


def _residual_normed(bug: dict, fixed: dict) -> None:
    x, ln = torch.randn(2, 4) * 5 + 3, torch.nn.LayerNorm(4)
    h = x + ln(x)
    ref = h + ln(h)  # identity branches: the stream keeps its scale
    blocks = [ns["Block"](4, torch.nn.Identity(), torch.nn.Identity()) for ns in (bug, fixed)]
    assert not torch.allclose(blocks[0](x), ref)
    torch.testing.assert_close(blocks[1](x), ref)


def _autograd_attention(q, k, v, g):
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = torch.softmax(leaves[0] @ leaves[1].transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ leaves[2]
    return out.detach(), torch.autograd.grad(out, leaves, g)


def _attn_jacobian(bug: dict, fixed: dict) -> None:
    q, k, v, g = (torch.randn(2, 5, 4, dtype=torch.float64) for _ in range(4))
    _, want = _autograd_attention(q, k, v, g)
    got_bug, got_fixed = bug["attention_backward"](q, k, v, g), fixed["attention_backward"](q, k, v, g)
    torch.testing.assert_close(got_bug[2], want[2])  # dv is right in the buggy snippet, as the prompt says
    assert not torch.allclose(got_bug[0], want[0]) and not torch.allclose(got_bug[1], want[1])
    for got, ref in zip(got_fixed, want, strict=True):
        torch.testing.assert_close(got, ref)


def _ln_variance_path(bug: dict, fixed: dict) -> None:
    x, w = torch.randn(3, 6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    b = torch.zeros(6, dtype=torch.float64)

    def autograd(g):
        leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
        out = F.layer_norm(leaves[0], (6,), leaves[1], leaves[2], 1e-5)
        return torch.autograd.grad(out, leaves, g)

    g = torch.randn(3, 6, dtype=torch.float64)
    flat = torch.ones(3, 1, dtype=torch.float64) * torch.randn(3, 1, dtype=torch.float64) / w  # g*w constant per row
    torch.testing.assert_close(bug["layernorm_backward"](x, w, flat)[0], autograd(flat)[0])
    got_bug = bug["layernorm_backward"](x, w, g)
    want = autograd(g)
    torch.testing.assert_close(got_bug[1], want[1])
    assert not torch.allclose(got_bug[0], want[0])
    for got, ref in zip(fixed["layernorm_backward"](x, w, g), want, strict=True):
        torch.testing.assert_close(got, ref)


def _ce_padding(bug: dict, fixed: dict) -> None:
    logits = torch.randn(8, 5, dtype=torch.float64)
    targets = torch.tensor([0, 4, -100, 2, -100, 1, 3, 3])
    leaf = logits.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(F.cross_entropy(leaf, targets, ignore_index=-100), leaf)
    torch.testing.assert_close(bug["cross_entropy_backward"](logits, targets), want * 6 / 8)
    torch.testing.assert_close(fixed["cross_entropy_backward"](logits, targets), want)


def _flash_d(bug: dict, fixed: dict) -> None:
    t, d = 40, 8
    q, k, v, g = (torch.randn(t, d, dtype=torch.float64) for _ in range(4))
    out, want = _autograd_attention(q, k, v, g)
    lse = torch.logsumexp(q @ k.T / math.sqrt(d), dim=-1)
    one_tile = bug["flash_backward"](q, k, v, out, lse, g, block=64)
    for got, ref in zip(one_tile, want, strict=True):
        torch.testing.assert_close(got, ref)
    tiled = bug["flash_backward"](q, k, v, out, lse, g, block=16)
    torch.testing.assert_close(tiled[2], want[2])
    assert not torch.allclose(tiled[0], want[0]) and not torch.allclose(tiled[1], want[1])
    for got, ref in zip(fixed["flash_backward"](q, k, v, out, lse, g, block=16), want, strict=True):
        torch.testing.assert_close(got, ref)


CASES: dict[str, Callable[[dict, dict], None]] = {
    "bug-flash-rescale-inverted": _flash,
    "bug-gqa-diagonal-masked": _gqa,
    "bug-sampling-top-p-crossing": _top_p,
    "bug-sampling-min-p-absolute": _min_p,
    "bug-beyond-window-mask-sign": _window,
    "bug-beyond-sinks-evicted": _sinks,
    "bug-tok-bpe-merge-step": _bpe_merge,
    "bug-tok-pair-count-unweighted": _pair_count,
    "bug-scale-params-gqa": _params,
    "bug-scale-mfu-forward-only": _mfu,
    "bug-serve-chunk-unmasked": _chunk,
    "bug-loss-log-of-softmax": _log_softmax,
    "bug-loss-smoothing-no-one-minus": _smoothing,
    "bug-moe-aux-no-n-experts": _aux,
    "eval-bug-bpb-characters": _bpb,
    "eval-bug-pass-at-k-pooled": _pooled,
    "ss-bug-prefix-hash-parent": _prefix_hash,
    "ss-bug-release-refcount": _refcount,
    "ss-bug-slot-offset": _slot,
    "bug-fp16-mask-constant": _fp16_fill,
    "bug-softmax-no-max": _no_max,
    "bug-split-heads-strided": _split_heads,
    "bug-merge-heads-no-transpose": _merge_heads,
    "bug-rope-frequency-exponent": _rope_exponent,
    "bug-rope-on-values": _rope_values,
    "bug-layernorm-unbiased-variance": _ln_variance,
    "bug-ffn-hidden-rounds-down": _ffn_rounding,
    "bug-gqa-repeat-tiles": _gqa_tiles,
    "bug-prenorm-residual": _residual_normed,
    "bug-backprop-softmax-jacobian-diagonal": _attn_jacobian,
    "bug-backprop-layernorm-variance-path": _ln_variance_path,
    "bug-backprop-ce-divides-by-padding": _ce_padding,
    "bug-backprop-flash-d-per-tile": _flash_d,
}


@pytest.fixture(scope="module")
def cards() -> dict:
    result = scan(questions_dir())
    assert not result.problems, result.problems[:5]
    return result.bank.by_id()


@pytest.mark.parametrize("card_id", sorted(CASES))
def test_snippet_shows_its_bug_and_the_fix_removes_it(cards: dict, card_id: str) -> None:
    card = cards[card_id]
    assert isinstance(card, SpotBugQuestion)
    torch.manual_seed(0)
    CASES[card_id](*_namespaces(card))
