"""The exercise index: every exercise drill knows, as one table, and the lists derived from it.

Imports no torch: `drill exercises`, `drill start`, `drill hint` and the CLI's
help texts read it without paying for torch, and a Python table costs nothing
to load (a YAML index would be parsed on every start-up). Everything that used
to keep its own list of exercises derives from `INDEX`: the spec modules
(`SPECS`), the in-model slots, the benchmark workloads, the mock's choice of a
coding exercise, `benchmarks/check_dir.py`'s solutions. `tests/test_exercise_index.py`
checks the index against the files (starter, hints, spec, fixtures, workload,
docs). Adding an exercise: see drill/judge/README.md, "Adding an exercise".
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drill.errors import UserError

TRACKS = ("attention", "positions", "norms", "mlp", "inference", "training", "backprop", "post_training",
          "kernels", "block", "debug")
DIFFICULTIES = ("easy", "medium", "hard")
DEVICES = ("any", "cuda")


@dataclass(frozen=True)
class Exercise:
    """One exercise. The contract itself is prose in exercises/README.md; this is what code needs.

    graded: the module-level names the hidden tests call (the starter defines
    each and raises NotImplementedError in it). topics: the question-bank
    topics (questions/<topic>.yaml) whose concept questions go with it.
    fixture: the plain correct solution in tests/fixtures/solutions/<name>/
    that benchmarks grade. in_model: has a slot in the reference decoder
    (`drill check --in-model`, drill/judge/decoder.py `GRADED_PARTS`). bench: has a
    `drill bench` workload (drill/bench/workloads.py). defaults: the
    contract's default values, each read from here by the spec and the
    workload: a parameter's default (`eps`) or a module-level constant's
    value when the file does not set it (`CONVENTION`, tile sizes); the
    starter must show the same value (checked by the index test).
    device: "cuda" for an exercise that can only be graded on a GPU (the mock
    never picks it without one, `drill check` refuses it in one line).
    wave: 1 for the first exercises, 2 and 3 for those of exercises/README.md's Wave 2 and Wave 3.
    imports: packages this exercise's files may import beyond the policy's
    usual list (layer 1, `policy.EXTRA_IMPORTS`): "triton" for a Triton
    kernel exercise, whose child may then also run Triton's compiler tools.
    generated: the starter is written by `drill start` (debug_gpt: a runnable file with planted bugs, drawn
    from --seed and --bugs); exercises/<name>.py is the file of one documented seed, not stubs.
    """

    name: str
    graded: tuple[str, ...]
    summary: str
    track: str
    difficulty: str
    topics: tuple[str, ...]
    fixture: str
    in_model: bool = False
    bench: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)
    device: str = "any"
    wave: int = 1
    imports: tuple[str, ...] = ()
    generated: bool = False

    @property
    def spec_module(self) -> str:
        """The module defining this exercise's `SPEC` (drill/judge/specs/<name>.py)."""
        return f"drill.judge.specs.{self.name}"


# The order is the order shown to learners (`drill exercises`, the README's table).
INDEX: tuple[Exercise, ...] = (
    Exercise("attention", ("scaled_dot_product_attention",),
             "softmax(q k^T / sqrt(d_k) + mask) v over any leading dims, masks of every legal shape",
             "attention", "medium", ("attention", "masking"), "good_matmul_softmax.py", in_model=True, bench=True),
    Exercise("mha", ("MultiHeadAttention",),
             "multi-head self-attention with q/k/v/o projections, heads split and merged",
             "attention", "medium", ("mha",), "good_view_transpose.py", bench=True),
    Exercise("rope", ("apply_rope",),
             "rotary position embedding at absolute positions, either pairing convention",
             "positions", "medium", ("positional",), "good_rotate_half.py", in_model=True, bench=True,
             defaults={"base": 10000.0, "CONVENTION": "half"}),
    Exercise("rmsnorm", ("RMSNorm",),
             "root-mean-square normalisation with a learned weight, accumulated in fp32",
             "norms", "easy", ("normalization",), "good_rsqrt.py", in_model=True, bench=True,
             defaults={"eps": 1e-6}),
    Exercise("swiglu", ("ffn_hidden_dim", "SwiGLU"),
             "the Llama feed-forward block and its hidden-size rule",
             "mlp", "easy", ("ffn",), "good_f_silu.py", in_model=True, bench=True,
             defaults={"multiple_of": 256}),
    Exercise("gqa", ("GroupedQueryAttention",),
             "causal grouped-query attention (MHA and MQA as special cases) without copying K/V",
             "attention", "medium", ("gqa",), "good_grouped_einsum.py", in_model=True, bench=True),
    Exercise("kv_cache", ("CachedSelfAttention",),
             "causal GQA with RoPE and a KV cache: any split of a sequence into calls gives the same output",
             "inference", "hard", ("kv_cache", "serving_structures"), "good_concat_bottom_right.py", in_model=True,
             bench=True, defaults={"rope_base": 10000.0, "CONVENTION": "half"}),
    Exercise("layernorm", ("LayerNorm",),
             "layer normalisation with a learned weight and bias, population variance, accumulated in fp32",
             "norms", "easy", ("normalization",), "good_two_pass.py", bench=True, defaults={"eps": 1e-5}, wave=2),
    Exercise("cross_entropy", ("cross_entropy",),
             "a stable cross-entropy loss over the last axis with ignore_index and label smoothing",
             "training", "medium", ("loss",), "good_logsumexp_by_hand.py", bench=True,
             defaults={"ignore_index": -100, "label_smoothing": 0.0}, wave=2),
    Exercise("sampling", ("filter_logits",),
             "next-token probabilities after temperature, top-k, top-p and min-p, in Hugging Face's order",
             "inference", "medium", ("sampling", "decoding"), "good_hf_warpers.py", bench=True, wave=2,
             defaults={"temperature": 1.0, "top_k": None, "top_p": None, "min_p": None}),
    Exercise("sinusoidal", ("sinusoidal_positions",),
             "fixed sin/cos position encodings at absolute positions, in either column layout",
             "positions", "easy", ("positional",), "good_outer_product.py", wave=2,
             defaults={"base": 10000.0, "LAYOUT": "interleaved"}),
    Exercise("alibi", ("alibi_slopes", "alibi_bias"),
             "ALiBi head slopes for any head count and the bottom-right aligned linear distance bias",
             "positions", "medium", ("positional",), "good_broadcast.py", wave=2),
    Exercise("flash_attention", ("flash_attention",),
             "FlashAttention's forward: score tiles, an online softmax and lse, never the full score matrix",
             "kernels", "hard", ("flash",), "good_online_softmax.py", bench=True,
             defaults={"BLOCK_Q": 64, "BLOCK_K": 64}, wave=2),
    Exercise("decoder_block", ("DecoderBlock",),
             "the pre-norm Llama block: RMSNorm, causal GQA with RoPE at given positions, SwiGLU, two residuals",
             "block", "medium", ("block",), "good_hf_llama.py", in_model=True, bench=True,
             defaults={"eps": 1e-6, "rope_base": 10000.0, "CONVENTION": "half"}, wave=2),
    Exercise("moe", ("MoE",),
             "a top-k routed mixture of SwiGLU experts with Mixtral's load-balancing loss",
             "mlp", "hard", ("moe",), "good_hf_mixtral_loop.py", bench=True,
             defaults={"NORM_TOPK_PROB": True}, wave=2),
    Exercise("rmsnorm_backward", ("rmsnorm_backward",),
             "RMSNorm's backward pass by hand: grad_x and grad_weight, no autograd",
             "backprop", "medium", ("normalization",), "good_closed_form.py", defaults={"eps": 1e-6}, wave=2),
    Exercise("triton_rmsnorm", ("rms_norm",),
             "RMSNorm as a @triton.jit kernel and its launcher: any width, fp32/fp16/bf16, strided inputs",
             "kernels", "hard", ("normalization", "flash"), "good_one_row_per_program.py",
             defaults={"eps": 1e-6}, device="cuda", imports=("triton",), wave=2),
    Exercise("lr_schedule", ("cosine_lr",),
             "linear warmup into a cosine decay with a floor, CS336's schedule, as exact Python floats",
             "training", "easy", ("optimizers", "training"), "good_three_pieces.py", wave=3),
    Exercise("grad_clip", ("clip_grad_norm_",),
             "global-norm gradient clipping in place, as torch.nn.utils.clip_grad_norm_, over a list or a generator",
             "training", "easy", ("optimizers", "training"), "good_global_norm.py", defaults={"eps": 1e-6}, wave=3),
    Exercise("layernorm_backward", ("layernorm_backward",),
             "LayerNorm's backward pass by hand: dx, dweight and dbias from the closed form, no autograd",
             "backprop", "medium", ("normalization", "training"), "good_closed_form.py", defaults={"eps": 1e-5},
             bench=True, wave=3),
    Exercise("cross_entropy_backward", ("cross_entropy_backward",),
             "the gradient of the mean cross-entropy by hand: softmax minus the smoothed target, ignored rows 0",
             "backprop", "medium", ("loss", "training"), "good_softmax_minus_target.py",
             defaults={"ignore_index": -100, "label_smoothing": 0.0}, bench=True, wave=3),
    Exercise("quant_matmul", ("quantize_rowwise", "int8_matmul"),
             "symmetric int8 codes with a scale per row, and their matmul summed exactly in integers",
             "inference", "medium", ("quantization",), "good_int32_accumulate.py", bench=True, wave=3),
    Exercise("rope_scaling", ("scaled_inv_freq",),
             "RoPE's frequencies stretched for long contexts: linear, NTK, dynamic NTK, YaRN and Llama 3.1",
             "positions", "medium", ("long_context", "positional"), "good_float64_math.py", wave=3,
             defaults={"factor": 1.0, "original_max_position": 8192, "beta_fast": 32.0, "beta_slow": 1.0,
                       "low_freq_factor": 1.0, "high_freq_factor": 4.0}),
    Exercise("adamw", ("AdamW",),
             "AdamW as a torch.optim.Optimizer: decoupled decay, bias-corrected moments, per-parameter state, groups",
             "training", "medium", ("optimizers", "training"), "good_plain_loop.py", wave=3),
    Exercise("grpo", ("group_advantages", "grpo_clip_loss"),
             "GRPO's group-normalised advantages and its clipped loss, each sequence averaged over its own tokens",
             "post_training", "medium", ("post_training",), "good_reshape_keepdim.py",
             defaults={"normalize_by_std": True, "eps": 1e-6}, wave=3),
    Exercise("ppo_gae", ("gae", "ppo_clip_loss"),
             "generalised advantage estimation by a reverse scan that stops at episode ends, and PPO's clipped loss",
             "post_training", "medium", ("post_training",), "good_reverse_loop.py", wave=3),
    Exercise("dpo", ("sequence_logprobs", "dpo_loss"),
             "response log-probabilities with the next-token shift, and DPO's sigmoid loss with detached rewards",
             "post_training", "medium", ("post_training",), "good_trl_style.py", wave=3),
    Exercise("lora", ("LoRALinear",),
             "a frozen nn.Linear plus a trainable low-rank update B A scaled alpha / r, PEFT's init, and its merge",
             "post_training", "easy", ("peft", "post_training"), "good_parameters.py", in_model=True, wave=3),
    Exercise("attention_backward", ("attention_backward",),
             "softmax attention's backward pass by hand: dq, dk, dv under any mask, empty rows zero, no autograd",
             "backprop", "medium", ("attention", "masking"), "good_closed_form.py", bench=True, wave=3),
    Exercise("bpe", ("train_bpe", "Tokenizer"),
             "byte-level BPE as GPT-2 and CS336 train it: the greater-pair tie rule, encode by merge rank, decode",
             "training", "medium", ("tokenization",), "good_incremental_dict.py", imports=("regex",), wave=3),
    Exercise("flash_attention_backward", ("flash_attention_backward",),
             "FlashAttention-2's backward in tiles: P rebuilt from lse, D from out, dq/dk/dv accumulated, no autograd",
             "backprop", "hard", ("flash", "attention"), "good_kv_outer.py",
             defaults={"BLOCK_Q": 64, "BLOCK_K": 64}, bench=True, wave=3),
    Exercise("speculative_decoding", ("verify",),
             "one verification step of speculative sampling: p / q acceptance, the residual, the bonus token",
             "inference", "medium", ("decoding", "sampling"), "good_loop_searchsorted.py", wave=3),
    Exercise("mla", ("MLA",),
             "DeepSeek-V2's multi-head latent attention: decoupled RoPE, a cache of only the latent and k_rope",
             "inference", "hard", ("kv_cache", "serving_structures"), "good_naive_expand.py", in_model=True,
             wave=3,
             defaults={"rope_base": 10000.0, "eps": 1e-6, "CONVENTION": "half"}),
    Exercise("sliding_window", ("sliding_window_attention", "RollingKVCache"),
             "causal attention over the last `window` keys, bottom-right aligned, and a KV cache that keeps only those",
             "inference", "medium", ("kv_cache", "long_context"), "good_masked_scores.py", in_model=True,
             wave=3),
    Exercise("beam_search", ("beam_search",),
             "beam search as in Hugging Face's generate: 2k candidates, eos hypotheses, length penalty, early stop",
             "inference", "medium", ("decoding",), "good_python_lists.py", defaults={"length_penalty": 1.0},
             wave=3),
    Exercise("paged_kv", ("PagedKVCache", "paged_attention"),
             "a paged KV cache: block pools, per-sequence block tables, a free list, and attention read through them",
             "inference", "hard", ("kv_cache", "serving_structures"), "good_stack_vectorised.py", bench=True, wave=3),
    Exercise("debug_gpt", ("GPTConfig", "GPT", "train_step", "generate"),
             "fix a mini GPT with planted bugs (the debug round), then add a KV cache to its generate",
             "debug", "medium", ("spot_bug", "kv_cache"), "good_cached.py", wave=3,
             generated=True),
)

_BY_NAME: dict[str, Exercise] = {e.name: e for e in INDEX}

# Exercise name -> module defining SPEC, in the index's order.
SPECS: dict[str, str] = {e.name: e.spec_module for e in INDEX}

# Every indexed exercise (each has a starter file and a spec).
ALL_EXERCISES: tuple[str, ...] = tuple(e.name for e in INDEX)


def entry(name: str) -> Exercise:
    """The index entry of an exercise (KeyError for a name not in the index)."""
    return _BY_NAME[name]


def default(name: str, arg: str) -> Any:
    """A default argument value of exercise `name`'s contract: the one place specs and workloads read it."""
    return _BY_NAME[name].defaults[arg]


def in_model_names() -> tuple[str, ...]:
    """Exercises with a slot in the reference decoder (`drill check --in-model`)."""
    return tuple(e.name for e in INDEX if e.in_model)


def bench_names() -> tuple[str, ...]:
    """Exercises with a `drill bench` workload."""
    return tuple(e.name for e in INDEX if e.bench)


def count_word(n: int) -> str:
    """How prose says a count of exercises ("seven"); the index test keeps the docs on it."""
    words = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
             "sixteen seventeen eighteen nineteen").split()
    tens = {20: "twenty", 30: "thirty", 40: "forty", 50: "fifty"}
    if n < len(words):
        return words[n]
    if n - n % 10 in tens:
        return tens[n - n % 10] + (f"-{words[n % 10]}" if n % 10 else "")
    return str(n)


def exercise_names() -> list[str]:
    """Exercises that have a starter file, in the index's order (then any extras)."""
    from drill.paths import exercises_dir  # importlib.resources: not on every CLI start-up

    found = {p.stem for p in exercises_dir().glob("*.py") if not p.stem.startswith("_")}
    ordered = [n for n in ALL_EXERCISES if n in found]
    return ordered + sorted(found - set(ordered))


def graded_names() -> list[str]:
    """Indexed exercises whose starter file and spec module are both installed, in the index's order.

    Found without importing the specs (they import torch): a trimmed install
    lacking one is not offered as gradable.
    """
    found = set(exercise_names())
    return [n for n, module in SPECS.items() if n in found and importlib.util.find_spec(module) is not None]


def is_graded(name: str) -> bool:
    return name in SPECS


_LOADING = threading.Lock()


def load_spec(name: str):
    """The Spec of a graded exercise (imports torch and the whole reference package).

    Serialised, and the reference package imported whole first: two grading
    threads importing `drill.reference` (whose __init__ imports its
    submodules) and one of its submodules at the same moment can trip
    Python's import deadlock detection, which failed a check with
    KeyError: 'drill.reference' (seen with `drill check DIR`'s two workers
    on their first files).
    """
    if name not in SPECS:
        raise UserError(_unknown(name, list(SPECS), "graded exercise"))
    with _LOADING:
        import drill.reference  # noqa: F401 - see above
        return importlib.import_module(SPECS[name]).SPEC


def resolve_exercise(path: Path, exercise: str | None) -> str:
    """--exercise wins; otherwise the file's stem must name a graded exercise."""
    name = exercise if exercise is not None else path.stem
    if name not in SPECS:
        if exercise is None:
            raise UserError(
                f"cannot tell the exercise from the file name '{path.name}'{did_you_mean(path.stem, list(SPECS))}; "
                f"name the file after it or pass --exercise ({', '.join(SPECS)})",
                str(path),
            )
        raise UserError(_unknown(name, list(SPECS), "graded exercise"))
    return name


def check_known(name: str) -> str:
    """A name of an exercise with a starter file, else a UserError listing them."""
    names = exercise_names()
    if name not in names:
        raise UserError(_unknown(name, names, "exercise"))
    return name


def did_you_mean(name: str, valid: list[str]) -> str:
    """' (did you mean 'attention'?)' for a near miss of one of `valid` (case, - and _ ignored), else ''."""
    import difflib  # only on the error path

    close = difflib.get_close_matches(name.strip().lower().replace("-", "_"), valid, n=1, cutoff=0.8)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _unknown(name: str, valid: list[str], what: str) -> str:
    return f"unknown {what} '{name}'{did_you_mean(name, valid)}; valid: {', '.join(valid)}"
