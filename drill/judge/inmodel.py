"""In-model check (`drill check FILE --in-model`): the learner's part inside the reference decoder.

Unit tests compare one component on chosen inputs; this runs a whole tiny
Llama (2 layers) with the learner's component swapped in, on the same
weights as the reference, and compares the logits of a full forward and a
greedy generation of 16 tokens (prefill, then one token per step through
the KV cache). It catches what unit tests cannot: a component that is right
alone but breaks when composed (dtype/device handling, state kept between
calls, a cache that does not survive being written into the decoder's).

Split of work, as for every check:
- the parent (`cases_for`) builds the reference decoder, draws a prompt,
  computes the reference logits and tokens, and describes two cases of kind
  "inmodel" (weights travel as tensors);
- the child never sees drill: it rebuilds the network from `decoder.py`,
  whose source travels in the case (`extra["decoder"]`) with the graded
  exercise's own component cut out (`decoder.source_for`), swaps the
  learner's component in and returns logits or tokens (`child.run_inmodel`).
  That decoder is the reference's math path written out in torch only, so no
  library op the exercise forbids is called on the learner's behalf.

Greedy generation compares token ids exactly, which is only fair if no step
is a near tie: the parent redraws the prompt until the reference's top-1 logit
beats the runner-up by a clear margin at every step.

gqa has no RoPE and no cache in its contract: its decoder uses attention
without positions (`NoRopeAttention`) and generates by re-running the whole
sequence each step; so does decoder_block (its block takes positions but no
cache), swapped in as every layer. mla's module replaces every layer's
attention, its (c_kv, k_rope) cache written into the decoder's preallocated
latent buffers (decoder.LatentCache); the parent's answers re-run the
sequence with the reference MLA. rope, kv_cache, decoder_block and mla follow the
file's CONVENTION: the parent computes both conventions' answers and the spec's
`prepare` keeps the declared one (kv_cache's and decoder_block's modules do their
own RoPE, so the child's decoder needs no change for them). sliding_window's
decoder attends over the last WINDOW positions in every layer (the parent's
reference through `drill.reference.sliding_window`): the full forward calls the
learner's `sliding_window_attention`, generation one `RollingKVCache` per layer
(prefill of a prompt longer than the window, then one token per step), both
behind the decoder's own projections and RoPE (`decoder.WindowAttention`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

KIND = "inmodel"
# Exercises whose file declares a RoPE CONVENTION: both answers are computed, the spec's `prepare` keeps one.
CONVENTION_EXERCISES = ("rope", "kv_cache", "decoder_block", "mla")
# Components without a cache in their contract: generation re-runs the whole sequence each step.
UNCACHED = ("gqa", "decoder_block")
NEW_TOKENS = 16
LOGIT_GAIN = 8.0
MARGIN = 1e-2  # minimum top-1 minus top-2 logit at every greedy step of the reference
# sliding_window's decoder: every layer attends over this many positions (the prompt is longer, so the cache
# evicts from the prefill on); its config carries it as "sliding_window" (Hugging Face's name).
WINDOW = 5
CONFIG = {
    "vocab_size": 97,
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 256,
}


class NoRopeAttention(nn.Module):
    """Decoder attention protocol around a module whose forward(x) is causal self-attention (gqa)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: Any = None) -> torch.Tensor:
        if cache is not None:
            raise RuntimeError("NoRopeAttention has no cache: generate by re-running the sequence")
        return self.inner(x)


# mla's sizes in the decoder (d_model and n_heads are CONFIG's): they travel in the case's config.
MLA_SIZES = {"kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}


class ReferenceMLA(nn.Module):
    """The reference MLA (transformers' DeepseekV2Attention names) as a decoder layer's attention, no cache:
    the parent's answers re-run the sequence, which a correct cached decode equals."""

    def __init__(self, d_model: int, n_heads: int, rope_base: float, eps: float, convention: str) -> None:
        super().__init__()
        from drill.reference.norm import RMSNorm

        r, dn, dr, dv = (MLA_SIZES[k] for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                                "v_head_dim"))
        self.n_heads, self.rope_base, self.eps, self.convention = n_heads, rope_base, eps, convention
        self.q_proj = nn.Linear(d_model, n_heads * (dn + dr), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d_model, r + dr, bias=False)
        self.kv_a_layernorm = RMSNorm(r, eps, impl="math")
        self.kv_b_proj = nn.Linear(r, n_heads * (dn + dv), bias=False)
        self.o_proj = nn.Linear(n_heads * dv, d_model, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: Any = None) -> torch.Tensor:
        from drill.reference.mla import mla_attention

        if cache is not None or int(positions[0]) != 0:
            raise RuntimeError("ReferenceMLA has no cache: generate by re-running the sequence")
        weights = {n: p for n, p in self.named_parameters()}
        return mla_attention(x, weights, self.n_heads, *MLA_SIZES.values(), rope_base=self.rope_base, eps=self.eps,
                             convention=self.convention)[0]


class ReferenceGQA(nn.Module):
    """The reference's grouped-query attention with the gqa exercise's interface (no RoPE)."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int) -> None:
        super().__init__()
        d_head = d_model // n_heads
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=False)
        self.o_proj = nn.Linear(n_heads * d_head, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from drill.reference.attention import grouped_query_attention

        w = (self.q_proj.weight, self.k_proj.weight, self.v_proj.weight, self.o_proj.weight)
        return grouped_query_attention(x, *w, self.n_heads, self.n_kv_heads, impl="math")[0]


def config_for(exercise: str) -> dict:
    """The decoder's config for an exercise: CONFIG, plus the window for sliding_window."""
    return {**CONFIG, "sliding_window": WINDOW} if exercise == "sliding_window" else CONFIG


def build_decoder(exercise: str, config: dict, convention: str = "half") -> Any:
    """The reference decoder the exercise's component is swapped into (math path everywhere)."""
    from drill.reference.model import Attention, Decoder, LlamaConfig

    config = dict(config)
    window = config.pop("sliding_window", None)
    cfg = LlamaConfig(**config, rope_convention=convention)
    if window is not None:
        from drill.reference.sliding_window import sliding_window_attention

        def windowed(q, k, v, mask):  # the default attention's full heads; the causal mask is the window's job
            return sliding_window_attention(q, k, v, window)

        return Decoder(cfg, attention_factory=lambda c, i: Attention(c, attn_fn=windowed, impl="math"), impl="math")
    if exercise == "gqa":
        def factory(c, i):
            return NoRopeAttention(ReferenceGQA(c.hidden_size, c.num_attention_heads, c.num_key_value_heads))

        return Decoder(cfg, attention_factory=factory, impl="math")
    if exercise == "mla":
        def mla_factory(c, i):
            return ReferenceMLA(c.hidden_size, c.num_attention_heads, c.rope_theta, c.rms_norm_eps, convention)

        return Decoder(cfg, attention_factory=mla_factory, impl="math")
    return Decoder(cfg, impl="math")


@torch.no_grad()
def greedy(model: Any, ids: torch.Tensor, new_tokens: int, *, cached: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (B, T + new), logits of each chosen step (B, new, V)): prefill+decode, or full recompute."""
    if cached:
        caches = model.new_caches(ids.shape[0], ids.shape[1] + new_tokens)
        logits = model(ids, caches)
    else:
        logits = model(ids)
    seq, steps = ids, []
    for i in range(new_tokens):
        last = logits[:, -1]
        steps.append(last)
        seq = torch.cat([seq, last.argmax(dim=-1, keepdim=True)], dim=1)
        if i + 1 < new_tokens:
            logits = model(seq[:, -1:], caches) if cached else model(seq)
    return seq, torch.stack(steps, dim=1)


def _margin(step_logits: torch.Tensor) -> float:
    top2 = step_logits.topk(2, dim=-1).values
    return float((top2[..., 0] - top2[..., 1]).min())


def cases_for(exercise: str, seed: int) -> list:
    """The two in-model cases (logits, greedy tokens), with the parent's expected answers filled in."""
    from drill.judge import spec
    from drill.judge.decoder import source_for
    from drill.judge.registry import in_model_names
    from drill.judge.spec import Case

    if exercise not in in_model_names():
        from drill.errors import UserError

        raise UserError(f"--in-model is available for {', '.join(in_model_names())}, not {exercise}")
    if exercise == "lora":  # a training step, not a generation (drill/judge/inmodel_lora.py)
        from drill.judge.inmodel_lora import cases_for as lora_cases

        return lora_cases(seed, CONFIG, build_decoder)
    conventions = ("half", "interleaved") if exercise in CONVENTION_EXERCISES else ("half",)
    gen = torch.Generator().manual_seed(seed)
    models = {}
    config = config_for(exercise)
    for conv in conventions:
        m = build_decoder(exercise, config, conv).eval()
        m.init_weights(generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            m.lm_head.weight.mul_(LOGIT_GAIN)  # well-separated logits: greedy steps are never near ties
        models[conv] = m
    state = {k: v.detach().clone() for k, v in models["half"].state_dict().items()}
    for m in models.values():
        m.load_state_dict(state)
    cached = exercise not in UNCACHED
    answers = {}
    took = {}  # per convention, CPU seconds of the last attempt's logits and tokens: the "slow" advisory's yardstick
    for _attempt in range(20):
        ids = torch.randint(0, CONFIG["vocab_size"], (2, 7), generator=gen)
        answers = {}
        for conv, m in models.items():
            t0 = spec.reference_clock()
            logits = m(ids).detach()
            t1 = spec.reference_clock()
            tokens, steps = greedy(m, ids, NEW_TOKENS, cached=cached and exercise != "mla")
            took[conv] = {"logits": t1 - t0, "tokens": spec.reference_clock() - t1}
            answers[conv] = (logits, tokens, _margin(steps))
        if min(a[2] for a in answers.values()) >= MARGIN:
            break
    params = {f"decoder.{k}": v for k, v in state.items()}
    what = {"logits": "logits of a full forward", "tokens": f"greedy generation of {NEW_TOKENS} tokens"}
    how = " (re-running the sequence each step)" if not cached else " (prefill + decode through the KV cache)"
    cases = []
    for returns in ("logits", "tokens"):
        alt = {conv: ((a[0] if returns == "logits" else a[1]), {}) for conv, a in answers.items()}
        case = Case(
            name=(f"in-model: {what[returns]} of a 2-layer Llama with your {exercise}"
                  + (how if returns == "tokens" else "")),
            target=KIND,
            kind=KIND,
            args={"ids": ids},
            params=params,
            extra={"exercise": exercise, "returns": returns, "new_tokens": NEW_TOKENS,
                   "config": dict(config, **MLA_SIZES) if exercise == "mla" else config,  # the child's mla sizes
                   "cached": cached, "decoder": source_for(exercise)},
            ctx={"dtype": "float32" if returns == "logits" else "int64", "in_model": True, "alt": alt},
        )
        case.expected, case.expected_grads = alt["half"]
        case.reference_s = took["half"][returns]
        cases.append(case)
    return cases
