"""The reference model: ground truth for the grader (fused kernels + math path).

Pure functions on tensors (so the grader can feed a learner's own weights) and
modules built on them. Every function takes `impl=None|"fused"|"math"`; see
`backend`. Invalid configurations raise ValueError naming the bad value.
"""

from .alibi import alibi_bias, alibi_slopes
from .attention import attention_backward, causal_mask, grouped_query_attention, multi_head_attention, sdpa
from .backend import get_impl, set_impl, use_impl
from .clip import clip_grad_norm
from .flash import attention_lse, flash_attention_backward_tiled, flash_attention_tiled
from .kv_cache import KVCache
from .lora import LoRALinear
from .loss import cross_entropy, cross_entropy_backward
from .mlp import SwiGLU, ffn_hidden_dim, swiglu
from .model import Attention, Decoder, LlamaConfig, PastKVAttention, copy_weights, llama_block
from .moe import MoE, load_balancing_loss, moe, route, router_probs
from .norm import LayerNorm, RMSNorm, layer_norm, layer_norm_backward, rms_norm, rms_norm_backward
from .optim import AdamW
from .paged_kv import PagedKVCache, paged_attention
from .quant import int8_matmul, quantize_rowwise
from .rope import apply_rope, half_to_interleaved_perm, rope_angles
from .sampling import filter_logits, keep_mask, softmax_kept
from .schedule import cosine_lr
from .sinusoidal import sinusoidal_positions

__all__ = [
    "AdamW",
    "Attention",
    "Decoder",
    "KVCache",
    "LayerNorm",
    "LlamaConfig",
    "LoRALinear",
    "MoE",
    "PagedKVCache",
    "PastKVAttention",
    "RMSNorm",
    "SwiGLU",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "attention_backward",
    "attention_lse",
    "causal_mask",
    "clip_grad_norm",
    "copy_weights",
    "cosine_lr",
    "cross_entropy",
    "cross_entropy_backward",
    "ffn_hidden_dim",
    "flash_attention_backward_tiled",
    "flash_attention_tiled",
    "filter_logits",
    "get_impl",
    "grouped_query_attention",
    "half_to_interleaved_perm",
    "int8_matmul",
    "layer_norm",
    "layer_norm_backward",
    "llama_block",
    "load_balancing_loss",
    "moe",
    "keep_mask",
    "multi_head_attention",
    "paged_attention",
    "quantize_rowwise",
    "rms_norm",
    "rms_norm_backward",
    "rope_angles",
    "route",
    "router_probs",
    "sdpa",
    "set_impl",
    "sinusoidal_positions",
    "softmax_kept",
    "swiglu",
    "use_impl",
]
