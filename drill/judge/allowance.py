"""What a from-scratch exercise may compute with: aten op families, not a blocklist of library ops.

Why (issue 30 §3): a blocklist of the library ops an exercise replaces is endless. LayerNorm passed as
`F.instance_norm`, RMSNorm as `F.group_norm`, a stable logsumexp as `torch.logcumsumexp(...)[..., -1]`:
each is a library normalisation or reduction under another name. An exercise with an `Allowance` runs
the learner's calls under the child's dispatch trap with these patterns, and any aten op outside them
trips as `forbidden_op`, named with the learner's line: the op families below are what a from-scratch
solution is made of (elementwise arithmetic, reductions, matmuls, shape and indexing ops), and the rest
of aten (normalisation kernels, fused losses, cumulative tricks, convolutions, ...) is not.

The patterns are matched against dispatch-level names, after PyTorch's composite ops decompose (so
`x.var()` is `var`, `F.normalize` is `linalg_vector_norm` + `clamp_min` + `div`); an op's in-place and
out= forms share its name with a trailing `_`. Forbidden patterns still win where both match.
"""

from __future__ import annotations

from dataclasses import dataclass

ELEMENTWISE = (
    "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "neg", "abs", "sign",
    "sgn", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "pow", "square", "reciprocal",
    "sin", "cos", "tan", "tanh", "sigmoid", "silu", "relu", "gelu", "erf", "erfc", "clamp", "clamp_min",
    "clamp_max", "clip", "minimum", "maximum", "fmax", "fmin", "where", "masked_fill", "eq", "ne", "lt", "le", "gt",
    "ge", "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_*", "isnan", "isinf", "isfinite",
    "isposinf", "isneginf", "isclose", "nan_to_num", "round", "floor", "ceil", "trunc", "frac", "lerp", "addcmul",
    "addcdiv", "hypot", "xlogy", "copysign", "positive", "conj", "conj_physical", "resolve_conj", "resolve_neg",
)
REDUCTIONS = (
    "sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "prod", "norm",
    "linalg_vector_norm", "argmax", "argmin", "all", "any", "count_nonzero", "aminmax", "nansum", "nanmean",
    "logsumexp",
)
MATMUL = ("mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "dot", "vdot", "mv", "addmv", "einsum", "linear",
          "outer", "tensordot")
SHAPE = (
    "view", "reshape", "_reshape_alias", "_unsafe_view", "expand", "expand_as", "permute", "transpose", "t",
    "unsqueeze", "squeeze", "flatten", "unflatten", "slice", "select", "narrow", "split", "split_with_sizes", "chunk",
    "unbind", "movedim", "contiguous", "clone", "copy", "_to_copy", "to", "alias", "detach", "lift_fresh",
    "lift_fresh_copy", "as_strided", "cat", "stack", "repeat", "repeat_interleave", "tile", "flip", "roll", "tril",
    "triu", "diagonal", "diag_embed", "diag", "unfold", "*_copy", "zeros", "ones", "full", "empty", "empty_strided",
    "zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full", "new_empty",
    "new_empty_strided", "arange", "linspace", "scalar_tensor", "fill", "zero", "_local_scalar_dense", "item",
    "eye", "resize", "set", "_has_compatible_shallow_copy_type", "is_same_size", "result_type",
)
INDEXING = (
    "index", "index_select", "gather", "scatter", "scatter_add", "scatter_reduce", "index_put", "_index_put_impl",
    "index_add", "index_copy", "index_fill", "masked_select", "masked_scatter", "nonzero", "take",
    "take_along_dim", "one_hot", "sort", "argsort", "topk", "embedding",
)
# The backward kernels of the families above, which the grader's own autograd pass runs on a forward
# exercise's graph (softmax and log_softmax's among them). Never for a backward exercise: there the
# learner writes the gradients, and a backward kernel called by hand would be the answer.
AUTOGRAD_OF_ALLOWED = ("*_backward", "*_backward_data", "_softmax_backward_data", "embedding_dense_backward")

FAMILIES = {"elementwise": ELEMENTWISE, "reductions": REDUCTIONS, "matmul": MATMUL, "shape": SHAPE,
            "indexing": INDEXING}


@dataclass(frozen=True)
class Allowance:
    """The aten ops one exercise may use: families (FAMILIES' keys) plus ops its contract names."""

    families: tuple[str, ...] = ("elementwise", "reductions", "matmul", "shape", "indexing")
    extra: tuple[str, ...] = ()  # op patterns the contract names (attention's softmax, say)
    graded_backward: bool = True  # the grader backpropagates through the learner's forward

    def patterns(self) -> tuple[str, ...]:
        """fnmatch patterns of every allowed op name, in-place forms included."""
        names = [op for family in self.families for op in FAMILIES[family]] + list(self.extra)
        if self.graded_backward:
            names += AUTOGRAD_OF_ALLOWED
        return tuple(dict.fromkeys(p for name in names for p in (name, f"{name}_")))

    def describe(self) -> str:
        """The allowance in words, for the one line a tripped op gets."""
        words = {"elementwise": "elementwise ops", "reductions": "reductions", "matmul": "matmuls",
                 "shape": "shape and copy ops", "indexing": "indexing ops"}
        named = [words[f] for f in self.families] + list(self.extra)
        return ", ".join(named[:-1]) + f" and {named[-1]}" if len(named) > 1 else named[0]
