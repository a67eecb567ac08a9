"""`LlamaConfig`: the decoder's hyper-parameters, validated when created.

Field names follow transformers' `LlamaConfig` so configs translate one to one
(`LlamaConfig.from_hf`). Validation happens here, once, so that every bad
combination fails with a ValueError naming the value instead of a shape error
deep inside a forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .rope import check_convention


@dataclass
class LlamaConfig:
    """Model hyper-parameters, named as in transformers' `LlamaConfig`. Validated on creation."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 2048
    rope_convention: str = "half"

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {name}={value!r}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} does not divide hidden_size={self.hidden_size}"
            )
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(
                f"num_key_value_heads={self.num_key_value_heads} does not divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"RoPE needs an even head dim, got head_dim={self.head_dim}")
        if not self.rms_norm_eps > 0:
            raise ValueError(f"rms_norm_eps must be > 0, got rms_norm_eps={self.rms_norm_eps}")
        if not self.rope_theta > 0:
            raise ValueError(f"rope_theta must be > 0, got rope_theta={self.rope_theta}")
        check_convention(self.rope_convention)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, hf_config: Any) -> LlamaConfig:
        """Read a transformers `LlamaConfig` (4.x `rope_theta` or 5.x `rope_parameters`)."""
        theta = getattr(hf_config, "rope_theta", None)
        params = getattr(hf_config, "rope_parameters", None)
        if theta is None and params:
            theta = params.get("rope_theta")
        return cls(
            vocab_size=hf_config.vocab_size,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            num_key_value_heads=hf_config.num_key_value_heads or hf_config.num_attention_heads,
            rope_theta=float(theta if theta is not None else 10000.0),
            rms_norm_eps=hf_config.rms_norm_eps,
            max_position_embeddings=hf_config.max_position_embeddings,
        )
