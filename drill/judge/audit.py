"""Advisory audits: what a correct solution costs, not whether it is correct.

The audits, each in two halves:
- the *measuring* half runs in the grader's child after the hidden tests, on
  the learner's own module (this file is loaded there by path, so it imports
  only the standard library and torch at module level);
- the *judging* half runs in the parent and turns the numbers into report
  lines, plus advisories when something is wasteful. Advisories never fail a
  check unless `--strict` is given.

gqa_memory and moe_work measure the graded calls themselves: the child's
case runner wraps each case marked extra["measure"] in `measure_case`, in
the grad mode and on the module and inputs the case grades, and the audit
step reports one measurement per call ({"cases": [...]}; the parent shows
the largest and advises on any). An audit that made a call of its own, under
no_grad on a module it built, could be told apart (issue 30 §2). gqa_memory
and moe_work build such a call only in-process (tests).

gqa_memory — did the forward copy K/V to n_heads heads, and what did it
allocate? A TorchDispatchMode sees every aten op of the forward. Each
storage allocated by an op is tracked (bytes; freed when the last tensor on
it dies: the shared counter of drill/storage_bytes.py, also `drill bench`'s), which
gives the forward's peak allocation. Storages are labelled
by where their data came from: the k_proj/v_proj weights mark their storage,
a matmul with such a weight produces "K" or "V", and elementwise or
data-movement ops (views, copies, cat, index_select, repeat, ...) pass
labels on, while any other contraction or reduction drops them. A storage
holding K-only (or V-only) data with at least n_heads * T * d_head elements
per batch row is K/V materialised at n_heads heads — whatever API made the
copy (repeat_interleave, expand + reshape, fancy indexing, or torch.matmul
broadcasting a size-1 group axis, which clones behind the scenes). The same
tracker measures a grouped implementation that never copies K/V, on the
same weights and input, as the number to compare the peak with.

kv_work — does a decode step's work stay linear in the cache, and are past
tokens re-projected? After a prompt, the module decodes one token at a time
(the cache tuple it returns is passed back unchanged); at a few cache
lengths the step runs under a dispatch mode that counts matmul FLOPs (as
torch.utils.flop_counter does, without importing torch._dynamo) and the rows
multiplied by each projection's weight (so it works whether the learner
calls self.k_proj(x) or F.linear(x, w)).

moe_work — does every expert run on every token? The learner's layer routes
each graded batch of tokens under the same FLOP and row counter, with every expert's
three weights watched: the rows each expert's weights multiplied (the
tokens it processed) and the matmul FLOPs of the whole forward, next to the
routed minimum (each token through its top_k experts, plus the router).
Weights gathered per token (torch.stack + indexing) are copies the row count
cannot see; then the FLOPs alone are judged. Also reported: the
NORM_TOPK_PROB the file declares, which the tests graded against.

mla_work — does an MLA decode step expand the whole latent cache through
kv_b_proj (naive) or absorb kv_b_proj into the query and after the softmax?
As kv_work: one token at a time after a prompt, counted at a few cache
lengths: the matmul FLOPs of the step and the rows kv_b_proj's weight (any
view of its storage) multiplied. Naive expands every cached latent (rows
grow with the cache); absorbed multiplies the weight by the new token's
query only. When the weight is copied first (rows unseen), the FLOPs added
per cached token decide, against both forms' counts for the audit's sizes.

quant_matmul — does int8_matmul multiply integers? The learner's function
runs on int8 codes under a dispatch mode that records every contraction
(mm, bmm, addmm, dot, mv, _int_mm, and an elementwise mul as large as the
M x N x K product): its operand dtypes and, for float operands, whether their
values are all integers (the codes cast to fp32) or not (dequantised values:
codes times scales). A float product of dequantised values passes the tests
and is reported as `quant_dequant_matmul`.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

CONTRACTIONS = {"mm", "bmm", "addmm", "baddbmm", "matmul", "dot", "mv", "addmv", "linear", "einsum", "addbmm"}
MOVEMENT = {
    "clone", "_to_copy", "copy", "copy_", "index_select", "index", "gather", "repeat", "repeat_interleave", "cat",
    "stack", "_unsafe_view", "contiguous", "expand_copy", "narrow_copy", "flip", "roll", "take", "masked_select",
}


def _counter_module() -> Any:
    """drill/storage_bytes.py, loaded by path: in the grader's child a copy sits next to this file (the driver
    folder, which cannot import `drill`); in the package it is one folder up."""
    key = "_drill_storage_bytes"
    if key not in sys.modules:
        here = os.path.dirname(os.path.abspath(__file__))
        path = next(p for p in (os.path.join(here, "storage_bytes.py"), os.path.join(os.path.dirname(here),
                                                                                    "storage_bytes.py"))
                    if os.path.isfile(p))
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[key] = module
    return sys.modules[key]


_counter = _counter_module()
StorageBytes, _ptr = _counter.StorageBytes, _counter.storage_ptr


class StorageTracker(StorageBytes):
    """The shared storage counter (live/peak bytes) plus K/V provenance labels and the copies they reveal.

    `sources` maps a weight's storage pointer to a label ("WK", "WV", ...); a
    contraction with a labelled weight makes "K" or "V"; `flag_numel` is the
    element count from which a K-only or V-only storage counts as expanded.
    An expanded storage is reported with the shape of the tensor the learner's
    own call returned on it (`shapes`, a TorchFunctionMode above the dispatch):
    repeat_interleave's (B, h, T, d) result, not the (B, h_kv, g, T, d) clone
    that its decomposition allocates first.
    """

    def __init__(self, sources: dict[int, str] | None = None, flag_numel: int | None = None,
                 copies: list[tuple[str, torch.Tensor]] | None = None) -> None:
        super().__init__(known=(sources or {}).keys())
        self.sources = sources or {}
        self.flag_numel = flag_numel
        self.copies = copies or []  # (label, sorted values of K or V at n_heads heads): found by value too
        self.labels: dict[int, frozenset] = {}
        self.expanded: dict[int, dict] = {}
        self.shapes = _LearnerShapes(self)

    def __enter__(self) -> StorageTracker:
        super().__enter__()
        self.shapes.__enter__()  # the function mode outside (above) the dispatch mode
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shapes.__exit__(*exc)
        super().__exit__(*exc)

    def released(self, ptr: int) -> None:
        self.labels.pop(ptr, None)
        self.shapes.unclaimed(ptr)

    def _label(self, t: torch.Tensor) -> frozenset:
        p = _ptr(t)
        if p in self.sources:
            return frozenset({self.sources[p]})
        return self.labels.get(p, frozenset())

    def made(self, name: str, func, seen: frozenset) -> frozenset:
        """The labels of an op's outputs, from its name and its inputs' labels (`seen`): K/V provenance here."""
        if name in CONTRACTIONS:
            return frozenset(lbl[1:] for lbl in seen if lbl in ("WK", "WV"))
        if getattr(func, "is_view", False) or name in MOVEMENT or torch.Tag.pointwise in getattr(func, "tags", ()):
            return seen
        return frozenset()

    def measure(self, p: int, o: torch.Tensor, name: str, seen: frozenset) -> None:
        """Called for every output on a tracked storage, after its labels are set (a subclass measures here)."""
        self._check_expanded(p, o)
        self._check_copy(p, o)

    def observe(self, func: Any, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        in_ptrs = {_ptr(t) for t in inputs}
        name = func.overloadpacket.__name__
        seen: frozenset = frozenset().union(*(self._label(t) for t in inputs)) if inputs else frozenset()
        made = self.made(name, func, seen)
        for o in outputs:
            p = _ptr(o)
            state = self.count(o, in_ptrs)
            if state == _counter.NEW:
                self.labels[p] = made
            elif state == _counter.LIVE and made and name.endswith("_"):
                self.labels[p] = self.labels.get(p, frozenset()) | made  # in-place write of K/V data
            if state is not None:
                self.measure(p, o, name, seen)

    def _check_copy(self, p: int, o: torch.Tensor) -> None:
        """A storage whose values are exactly K (or V) at n_heads heads, in any layout and made by any op.

        Labels follow data through movement ops; a contraction with a constant
        (a one-hot head-picking matrix in an einsum) drops them while copying
        K all the same. The sorted values of such a storage equal the sorted
        values of K repeated per group, whatever the layout, so the audit
        compares those too (after every write into the storage).
        """
        if not self.copies or p in self.expanded or not o.dtype.is_floating_point:
            return
        numel = self.live[p][0] // max(1, o.element_size())
        for what, ref in self.copies:
            if numel != ref.numel():
                continue
            flat = torch.empty(0, dtype=o.dtype, device=o.device).set_(o.untyped_storage(), 0, (numel,))
            got = flat.detach().float().sort().values
            if torch.allclose(got, ref, rtol=1e-4, atol=1e-5):
                self.expanded[p] = {"what": what, "bytes": self.live[p][0], "shape": list(o.shape)}
                self.shapes.found(p)
                return

    def _check_expanded(self, p: int, o: torch.Tensor) -> None:
        labels = self.labels.get(p, frozenset())
        if self.flag_numel is None or p in self.expanded or labels not in (frozenset({"K"}), frozenset({"V"})):
            return
        numel = self.live[p][0] // max(1, o.element_size())
        if numel >= self.flag_numel:
            self.expanded[p] = {"what": next(iter(labels)), "bytes": self.live[p][0], "shape": list(o.shape)}
            self.shapes.found(p)


class _LearnerShapes(TorchFunctionMode):
    """Sees the learner's own torch calls (repeat_interleave, expand, reshape, @, ...), before they decompose
    into the aten ops the dispatch mode sees. The first call that returns a tensor on a storage found
    expanded gives that storage's reported shape, as the learner's code holds it. A storage that dies inside
    the call that made it (matmul broadcasting a size-1 group axis clones K for itself) never reaches the
    learner: it keeps the shape the op gave it and says which call made it (`inside`)."""

    def __init__(self, tracker: StorageTracker) -> None:
        super().__init__()
        self.tracker = tracker
        self.call = ""  # the learner's torch call running now
        self.pending: dict[int, str] = {}  # expanded storage -> the call that made it, until a tensor on it returns

    def found(self, ptr: int) -> None:
        self.pending[ptr] = self.call

    def unclaimed(self, ptr: int) -> None:
        call = self.pending.pop(ptr, None)
        if call:
            self.tracker.expanded[ptr]["inside"] = call

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.call = getattr(func, "__name__", "").strip("_")
        try:
            out = func(*args, **(kwargs or {}))
        finally:
            self.call = ""
        if self.pending:
            for t in _counter.tensors_in(out):
                p = _ptr(t)
                if self.pending.pop(p, None) is not None:
                    self.tracker.expanded[p]["shape"] = list(t.shape)
        return out


# Ops that write their input's data elsewhere (a tile copied into a bigger buffer): labels follow the data.
SCATTERS = {"index_put", "index_put_", "slice_scatter", "select_scatter", "index_copy", "index_copy_",
            "masked_scatter", "masked_scatter_", "scatter", "scatter_", "copy_", "_softmax", "_log_softmax",
            "_safe_softmax", "softmax", "log_softmax", "constant_pad_nd", "pad", "reflection_pad1d",
            "replication_pad1d", "detach", "alias", "lift_fresh", "lift_fresh_copy"}
# Score-like labels: "S" scores and what is computed from them (P, dS), "D" the backward's dP = grad_out v^T.
SCORE_LABELS = frozenset({"S", "D"})
REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "logsumexp", "prod", "norm", "linalg_vector_norm"}


class ScoreTracker(StorageTracker):
    """flash_attention's tiling: every floating-point storage that holds attention scores, and each q.k product.

    `sources` labels the q and k handed to the call "Q" and "K". Labels flow
    through views, copies, pointwise ops and softmax; a contraction (or a sum
    of elementwise products) of data carrying both Q and K makes scores "S";
    anything computed from scores by a contraction (p @ v) or a reduction
    (row max, row sum) is no longer scores. For flash_attention_backward the
    grad_out and v handed to the call are labelled "G" and "V" too: their
    contraction dP = grad_out v^T is "D", score-like (it is as large as a
    score tile), though not a q.k product; a reduction over data holding both
    P and dP (D = rowsum(P * dP)) is counted in `d_from_p`. Per storage it keeps the largest
    float score storage seen (elements per (batch, head) = ceil(numel / (B*H)),
    its shape, dtype and the learner's line), and counts the q.k products and
    the scores they computed, both per (batch, head). `line_of` is the child's learner_line_of_stack.
    """

    def __init__(self, sources: dict[int, str], batch_heads: int, line_of) -> None:
        super().__init__(sources)
        self.batch_heads = max(1, batch_heads)
        self.line_of = line_of
        self.score_storages = 0
        self._matrices = 0  # score matrices the q.k products made, over all (batch, head) pairs
        self.computed = 0  # scores computed by q.k products, per (batch, head)
        self.largest: dict = {"per_bh": 0, "numel": 0, "line": 0, "dtype": "", "shape": []}
        self._counted: set[int] = set()
        self.d_from_p = 0  # reductions over data holding both P and dP (flash_attention_backward's rowsum(P * dP))

    def made(self, name: str, func, seen: frozenset) -> frozenset:
        qk = {"Q", "K"} <= seen
        gv = {"G", "V"} <= seen  # grad_out and v (the backward's dP = grad_out v^T), when labelled
        scores = seen & SCORE_LABELS
        if name in CONTRACTIONS:
            if scores:
                return frozenset()
            return frozenset({"S"}) if qk else (frozenset({"D"}) if gv else seen)
        if name in REDUCTIONS or torch.Tag.reduction in getattr(func, "tags", ()):
            if {"S", "D"} <= seen:  # rowsum(P * dP): the backward's D taken from the probabilities
                self.d_from_p += 1
            if scores:
                return frozenset()
            return frozenset({"S"}) if qk else (frozenset({"D"}) if gv else frozenset())
        pointwise = torch.Tag.pointwise in getattr(func, "tags", ())
        if pointwise and scores and not getattr(func, "is_view", False) and self._widens_scores():
            # scores broadcast against another tensor into something larger: an outer product, which is how
            # einsum contracts a dimension of size 1 (p @ v over a one-key tile comes out as p * v): no longer scores
            return seen - SCORE_LABELS
        if getattr(func, "is_view", False) or name in MOVEMENT or name in SCATTERS or pointwise:
            return seen
        return frozenset()

    def observe(self, func: Any, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        self._io = (inputs, outputs)  # for `made`, which sees only the inputs' labels
        super().observe(func, inputs, outputs)

    def _widens_scores(self) -> bool:
        """Whether the op being observed makes an output larger than each of its score-labelled inputs."""
        inputs, outputs = self._io
        biggest = max((t.numel() for t in inputs if self._label(t) & SCORE_LABELS), default=0)
        return any(o.numel() > biggest for o in outputs)

    @property
    def products(self) -> int:
        """q.k products per (batch, head): a batched tile (B, H, bq, bk) and a loop over the B * H heads making
        (bq, bk) tiles count alike, so the causal checks hold at any batch and head count."""
        return -(-self._matrices // self.batch_heads)

    def released(self, ptr: int) -> None:
        super().released(ptr)  # the storage is gone: a later one at this address is a new one
        self._counted.discard(ptr)
        if self.largest.get("ptr") == ptr:
            self.largest["ptr"] = None

    def measure(self, p: int, o: torch.Tensor, name: str, seen: frozenset) -> None:
        labels = self.labels.get(p, frozenset())
        if not labels & SCORE_LABELS or not o.is_floating_point():
            return
        numel = self.live[p][0] // max(1, o.element_size())
        per_bh = -(-numel // self.batch_heads)
        if p not in self._counted:
            self._counted.add(p)
            self.score_storages += 1
            if "S" in labels and "S" not in seen:  # a fresh q.k product, not scores derived from scores
                self._matrices += o.numel() // max(1, o.shape[-1] * o.shape[-2]) if o.dim() >= 2 else 1
                self.computed += -(-o.numel() // self.batch_heads)
        if per_bh > self.largest["per_bh"]:
            line, _ = self.line_of()
            self.largest = {"per_bh": per_bh, "numel": numel, "line": int(line or 0), "ptr": p,
                            "kind": 1 if "S" in labels else 2,  # 1: scores, P or dS; 2: dP alone
                            "dtype": str(o.dtype).replace("torch.", ""), "shape": [int(n) for n in o.shape]}
        elif p == self.largest.get("ptr") and o.numel() == numel:  # a view of it, as the learner's code sees it
            self.largest["shape"] = [int(n) for n in o.shape]  # (matmul's (B*H, T, T) comes back as (B, H, T, T))


# ---------------------------------------------------------------- child side


def _grouped_baseline(x, wq, wk, wv, wo, h: int, h_kv: int) -> torch.Tensor:
    """Causal GQA that never copies K/V: each KV head's query group folded into the rows; frees early."""
    b, t, _ = x.shape
    dh = wq.shape[0] // h
    g = h // h_kv
    q = (x @ wq.t()).view(b, t, h_kv, g, dh).permute(0, 2, 3, 1, 4).reshape(b, h_kv, g * t, dh)
    k = (x @ wk.t()).view(b, t, h_kv, dh).transpose(1, 2)
    s = q @ k.transpose(-1, -2)
    del q, k
    s.mul_(1.0 / math.sqrt(dh))
    future = torch.ones(t, t, dtype=torch.bool).triu_(1).repeat(g, 1)
    s.masked_fill_(future, float("-inf"))
    del future
    p = s.softmax(-1)
    del s
    v = (x @ wv.t()).view(b, t, h_kv, dh).transpose(1, 2)
    o = (p @ v).view(b, h_kv, g, t, dh).permute(0, 3, 1, 2, 4).reshape(b, t, h * dh)
    del p, v
    return o @ wo.t()


GQA_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")


def measure_gqa(sizes: dict, module: Any, x: torch.Tensor, call: Any, host: Any) -> tuple[Any, dict]:
    """The memory measurement of one forward, `call()`, of the learner's `module` on `x`: its result and figures.

    In the child this is a graded call (issue 30 §2: a measured call must be one the grader also grades, in the
    same grad mode, on the same module and inputs, or a file behaves well only while measured). So nothing here
    changes the grad mode: saved-for-backward tensors count in the peak, and the grouped baseline runs the same
    way (same weights, same x) so that the two peaks compare like with like."""
    b, t, dm = (int(n) for n in x.shape)
    h, h_kv = int(sizes["n_heads"]), int(sizes["n_kv_heads"])
    dh = dm // h
    weights = {n: host.resolve_attr(module, f"{n}.weight", "GroupedQueryAttention") for n in GQA_PROJ}
    sources = {_ptr(weights["k_proj"]): "WK", _ptr(weights["v_proj"]): "WV"}
    with torch.no_grad():  # the grader's own arithmetic: K and V at n_heads heads, to recognise copies by value
        xf = x.detach().float()
        kv = [(xf @ weights[n].detach().float().t()).view(b, t, h_kv, dh).repeat_interleave(h // h_kv, dim=2)
              .flatten() for n in ("k_proj", "v_proj")]
        copies = [("K", kv[0].sort().values), ("V", kv[1].sort().values),
                  ("K", torch.cat(kv).sort().values)]  # K and V stacked in one storage
    with StorageTracker(sources, b * h * t * dh, copies) as learner:
        out = call()
    with StorageTracker() as base:
        ref = _grouped_baseline(x, *(weights[n] for n in GQA_PROJ), h, h_kv)
    del ref
    return out, {
        "config": {"batch": b, "seq": t, "d_model": dm, "n_heads": h, "n_kv_heads": h_kv},
        "peak_bytes": learner.peak,
        "baseline_peak_bytes": base.peak,
        "kv_bytes": 2 * b * h_kv * t * dh * x.element_size(),
        "expanded": sorted(learner.expanded.values(), key=lambda e: e["what"]),
    }


def gqa_memory(config: dict, mod: Any, host: Any) -> dict:
    """measure_gqa on a module built here at the audit's sizes, as a graded case builds one (tests, in-process)."""
    b, t, dm, h, h_kv = (config[k] for k in ("batch", "seq", "d_model", "n_heads", "n_kv_heads"))
    gen = torch.Generator().manual_seed(0)
    module = mod.GroupedQueryAttention(dm, h, h_kv)
    with torch.no_grad():
        for name in GQA_PROJ:
            w = host.resolve_attr(module, f"{name}.weight", "GroupedQueryAttention")
            w.copy_(torch.randn(w.shape, generator=gen) / math.sqrt(w.shape[1]))
    x = torch.randn(b, t, dm, generator=gen).requires_grad_(True)
    out, data = measure_gqa(config, module, x, lambda: module(x), host)
    del out
    return data


def matmul_flops(name: str, args: tuple, out: Any) -> int:
    """2*M*N*K for the aten matmul family (what FlopCounterMode counts for them)."""
    if name in ("mm", "addmm", "bmm", "baddbmm") and isinstance(out, torch.Tensor):
        a = args[1] if name in ("addmm", "baddbmm") else args[0]
        return 2 * out.numel() * int(a.shape[-1])
    if name in ("mv", "addmv", "dot") and isinstance(out, torch.Tensor):
        a = args[1] if name == "addmv" else args[0]
        return 2 * max(1, out.numel()) * int(a.shape[-1])
    return 0


class RowCounter(TorchDispatchMode):
    """Matmul FLOPs, and rows multiplied by each watched weight (matched by storage).

    Counts FLOPs itself instead of using torch.utils.flop_counter.FlopCounterMode:
    the numbers are the same for the matmul family, and FlopCounterMode would
    import torch._dynamo (~1.7 s) into every graded run.
    """

    def __init__(self, weights: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.by_ptr = {_ptr(w): (name, w.shape[1]) for name, w in weights.items()}
        self.rows = {name: 0 for name in weights}
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        self.flops += matmul_flops(name, args, out)
        if name in CONTRACTIONS:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            for i, a in enumerate(tensors):
                hit = self.by_ptr.get(_ptr(a))
                if hit is None:
                    continue
                others = [o for j, o in enumerate(tensors) if j != i and o.dim() >= 1]
                if others:
                    name, fan_in = hit
                    self.rows[name] += max(o.numel() for o in others) // max(1, fan_in)
        return out


# TorchDispatchMode wraps __torch_dispatch__ in torch._disable_dynamo, whose first call imports
# torch._dynamo (~1.7 s on torch 2.13 CPU); nothing here is compiled, so use the plain functions.
# (StorageTracker and ScoreTracker inherit the plain one from storage_bytes.py.)
RowCounter.__torch_dispatch__ = getattr(RowCounter.__torch_dispatch__, "__wrapped__", RowCounter.__torch_dispatch__)


def kv_work(config: dict, mod: Any, host: Any) -> dict:
    dm, h, h_kv, prompt = config["d_model"], config["n_heads"], config["n_kv_heads"], config["prompt"]
    lengths = sorted(config["lengths"])
    gen = torch.Generator().manual_seed(0)
    module = mod.CachedSelfAttention(dm, h, h_kv, 10000.0)
    weights = {n: host.resolve_attr(module, f"{n}.weight", "CachedSelfAttention")
               for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
    with torch.no_grad():
        for w in weights.values():
            w.copy_(torch.randn(w.shape, generator=gen) / math.sqrt(w.shape[1]))
    x = torch.randn(1, lengths[-1] + 1, dm, generator=gen)
    unpack = host.extension("chain").unpack
    flops, rows = [], {n: [] for n in ("q_proj", "k_proj", "v_proj")}
    # The decode steps run with autograd on, as the graded chained calls do: under no_grad a file could tell
    # it was being measured (torch.is_grad_enabled()) and re-project only then (issue 30 §2).
    _, cache = unpack(module(x[:, :prompt]), 0, "CachedSelfAttention")
    for pos in range(prompt, lengths[-1] + 1):
        if pos in lengths:
            with RowCounter({n: weights[n] for n in rows}) as counter:
                _, cache = unpack(module(x[:, pos : pos + 1], past_kv=cache), pos, "CachedSelfAttention")
            flops.append(counter.flops)
            for n in rows:
                rows[n].append(counter.rows[n])
        else:
            _, cache = unpack(module(x[:, pos : pos + 1], past_kv=cache), pos, "CachedSelfAttention")
    return {"lengths": lengths, "flops": flops, "rows": rows, "t_new": 1, "batch": 1}


def mla_work(config: dict, mod: Any, host: Any) -> dict:
    dm, h, r, dn, dr, dv = (config[k] for k in ("d_model", "n_heads", "kv_lora_rank", "qk_nope_head_dim",
                                                 "qk_rope_head_dim", "v_head_dim"))
    prompt, lengths = config["prompt"], sorted(config["lengths"])
    gen = torch.Generator().manual_seed(0)
    module = mod.MLA(dm, h, r, dn, dr, dv, 10000.0, 1e-6)
    names = ("q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
    weights = {n: host.resolve_attr(module, f"{n}.weight", "MLA") for n in names}
    with torch.no_grad():
        for w in weights.values():
            w.copy_(torch.randn(w.shape, generator=gen) / math.sqrt(w.shape[1]))
    x = torch.randn(1, lengths[-1] + 1, dm, generator=gen)
    unpack = host.extension("chain").unpack
    flops, rows = [], []
    _, cache = unpack(module(x[:, :prompt]), 0, "MLA")  # with autograd on, as kv_work (issue 30 §2)
    for pos in range(prompt, lengths[-1] + 1):
        if pos in lengths:
            with RowCounter({"kv_b_proj": weights["kv_b_proj"]}) as counter:
                _, cache = unpack(module(x[:, pos : pos + 1], past=cache), pos, "MLA")
            flops.append(counter.flops)
            rows.append(counter.rows["kv_b_proj"])
        else:
            _, cache = unpack(module(x[:, pos : pos + 1], past=cache), pos, "MLA")
    return {"lengths": lengths, "flops": flops, "rows": rows, "config": {k: config[k] for k in (
        "d_model", "n_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}}


def _moe_weights(module: Any, n_experts: int, host: Any) -> dict[str, torch.Tensor]:
    """The router's weight and each expert's three, by the names the routing audit counts rows under."""
    watched = {"router": host.resolve_attr(module, "router.weight", "MoE")}
    for i in range(n_experts):
        for part in ("w_gate", "w_up", "w_down"):
            watched[f"{i}.{part}"] = host.resolve_attr(module, f"experts.{i}.{part}.weight", "MoE")
    return watched


def measure_moe(sizes: dict, module: Any, x: torch.Tensor, call: Any, host: Any, mod: Any) -> tuple[Any, dict]:
    """The routing measurement of one forward, `call()`, of the learner's MoE `module` on `x` (a graded call in the
    child, in its grad mode, as measure_gqa): matmul FLOPs and the token rows each expert's weights multiplied."""
    dm, dff, e, k = (int(sizes[key]) for key in ("d_model", "d_ff", "n_experts", "top_k"))
    with RowCounter(_moe_weights(module, e, host)) as counter:
        out = call()
    value = getattr(mod, "NORM_TOPK_PROB", True)
    return out, {
        "config": {"tokens": int(x.numel() // max(1, x.shape[-1])), "d_model": dm, "d_ff": dff, "n_experts": e,
                   "top_k": k},
        "flops": counter.flops,
        "rows": [sum(counter.rows[f"{i}.{part}"] for part in ("w_gate", "w_up", "w_down")) for i in range(e)],
        "norm_topk_prob": value if isinstance(value, bool) else None,
        "declared": hasattr(mod, "NORM_TOPK_PROB"),
    }


def moe_work(config: dict, mod: Any, host: Any) -> dict:
    """measure_moe on a layer built here at the audit's sizes, as a graded case builds one (tests, in-process)."""
    n, dm, dff, e, k = (config[key] for key in ("tokens", "d_model", "d_ff", "n_experts", "top_k"))
    gen = torch.Generator().manual_seed(0)
    module = mod.MoE(dm, dff, e, k)
    with torch.no_grad():
        for w in _moe_weights(module, e, host).values():
            w.copy_(torch.randn(w.shape, generator=gen) / math.sqrt(w.shape[1]))
    x = torch.randn(1, n, dm, generator=gen).requires_grad_(True)
    out, data = measure_moe(config, module, x, lambda: module(x), host, mod)
    del out
    return data


# The audits measured during graded calls: the child's case runner calls `measure_case` for a case marked
# extra["measure"] and keeps what it returns; the audit step then reports those measurements (`on_cases`).
ON_CASES = {"gqa_memory", "moe_work"}


def measure_case(name: str, init: list, module: Any, args: list, call: Any, host: Any, mod: Any) -> tuple[Any, dict]:
    """Measure a graded call (`call()` runs it) of a module built with `init`; returns (its result, figures)."""
    if name == "gqa_memory":
        return measure_gqa({"n_heads": init[1], "n_kv_heads": init[2]}, module, args[0], call, host)
    if name == "moe_work":
        return measure_moe(dict(zip(("d_model", "d_ff", "n_experts", "top_k"), init, strict=True)), module, args[0],
                           call, host, mod)
    raise KeyError(name)


def kernel_bandwidth(config: dict, mod: Any, host: Any) -> dict:
    """triton_rmsnorm: the launcher timed with CUDA events on rows far larger than L2, next to a device copy.

    Three input buffers are used in turn (together well past the 60 MB L2 of an H200), three warm-up calls
    compile the kernel first, and the events of every call are read after one synchronize. The copy of
    the same bytes, timed the same way in the same run, is the practical peak the result is judged against.
    """
    launches = host.LAUNCHES[0] if getattr(host, "LAUNCHES", None) else (lambda: -1)
    if getattr(host, "DEVICE", "cpu") != "cuda":
        return {"skipped": "not on a CUDA device (Triton's interpreter on the CPU measures no bandwidth)",
                "launches": launches()}
    rows, width, reps = int(config["rows"]), int(config["width"]), int(config["reps"])
    dtype = getattr(torch, config["dtype"])
    fn = getattr(mod, config["target"])
    gen = torch.Generator(device="cuda").manual_seed(0)
    xs = [torch.randn(rows, width, device="cuda", generator=gen).to(dtype) for _ in range(3)]
    w = (torch.randn(width, device="cuda", generator=gen) * 0.5 + 1).to(dtype)
    before = launches()
    for x in xs:
        fn(x, w)
    torch.cuda.synchronize()
    launched = launches() - before

    def median_s(call) -> float:
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for i, (start, end) in enumerate(pairs):
            start.record()
            call(i)
            end.record()
        torch.cuda.synchronize()
        times = sorted(start.elapsed_time(end) / 1e3 for start, end in pairs)
        return times[len(times) // 2]

    kernel = median_s(lambda i: fn(xs[i % 3], w))
    dst = torch.empty_like(xs[0])
    copy = median_s(lambda i: dst.copy_(xs[i % 3]))
    props = torch.cuda.get_device_properties(0)
    size = xs[0].element_size()
    return {
        "rows": rows, "width": width, "dtype": config["dtype"], "launches": launched,
        "bytes": 2 * rows * width * size + width * size, "median_s": kernel,
        "copy_bytes": 2 * rows * width * size, "copy_median_s": copy,
        "device_name": props.name, "memory_clock_khz": int(getattr(props, "memory_clock_rate", 0) or 0),
        "bus_width_bits": int(getattr(props, "memory_bus_width", 0) or 0),
    }


QUANT_CONTRACTIONS = {"mm", "bmm", "addmm", "baddbmm", "dot", "mv", "addmv", "_int_mm", "addbmm"}


class ProductRecorder(TorchDispatchMode):
    """Each contraction's operand dtypes, and whether its float operands hold integers only (quant_matmul)."""

    def __init__(self, big: int) -> None:
        super().__init__()
        self.big = big  # an elementwise mul this large is the product written as broadcast-and-sum
        self.seen: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in QUANT_CONTRACTIONS or (name == "mul" and isinstance(out, torch.Tensor) and out.numel() >= self.big):
            tensors = [a for a in args if isinstance(a, torch.Tensor) and a.dim() >= 1]
            floats = [t for t in tensors if t.is_floating_point()]
            self.seen.append({
                "op": name,
                "dtypes": [str(t.dtype).replace("torch.", "") for t in tensors],
                "integral": all(bool(torch.equal(t, torch.round(t))) for t in floats),
            })
        return out


ProductRecorder.__torch_dispatch__ = getattr(ProductRecorder.__torch_dispatch__, "__wrapped__",
                                             ProductRecorder.__torch_dispatch__)


def quant_matmul(config: dict, mod: Any, host: Any) -> dict:
    m, n, k = config["m"], config["n"], config["k"]
    gen = torch.Generator().manual_seed(0)
    a_q = torch.randint(-127, 128, (m, k), generator=gen, dtype=torch.int8)
    b_q = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8)
    a_s = torch.rand(m, generator=gen) * 0.01 + 0.001
    b_s = torch.rand(n, generator=gen) * 0.01 + 0.001
    with torch.no_grad(), ProductRecorder(m * n * k) as rec:
        mod.int8_matmul(a_q, a_s, b_q, b_s)
    return {"config": {"m": m, "n": n, "k": k}, "products": rec.seen[:20]}


CHILD_AUDITS = {"gqa_memory": gqa_memory, "kv_work": kv_work, "moe_work": moe_work, "mla_work": mla_work,
                "kernel_bandwidth": kernel_bandwidth, "quant_matmul": quant_matmul}


def run(config: dict, mod: Any, host: Any) -> dict:
    """Child entry point: the named audit's measurements (JSON-safe). An audit measured during the graded calls
    reports those, {"cases": [one measurement per call]}; the others make their own calls here."""
    if config["name"] in ON_CASES and getattr(host, "MEASURED", None) is not None:
        return {"cases": list(host.MEASURED.get(config["name"], []))}
    return CHILD_AUDITS[config["name"]](config, mod, host)


# --------------------------------------------------------------- parent side


def kb(n: float) -> str:
    return f"{n / 1024:.0f} KB" if n < 10 * 2**20 else f"{n / 2**20:.1f} MB"


def judge_gqa_memory(data: dict) -> tuple[list[str], list[str]]:
    c = data["config"]
    g = c["n_heads"] // c["n_kv_heads"]
    shape = (f"B={c['batch']}, T={c['seq']}, d_model={c['d_model']}, n_heads={c['n_heads']},"
             f" n_kv_heads={c['n_kv_heads']}")
    peak, base = int(data["peak_bytes"]), int(data["baseline_peak_bytes"])
    expanded = data.get("expanded") or []
    lines = [f"memory audit ({shape}): forward peak {kb(peak)}; a grouped implementation that never copies K/V peaks "
             f"at {kb(base)}"]
    if not expanded:
        lines.append(f"K/V stay at {c['n_kv_heads']} heads (not materialised at n_heads={c['n_heads']})")
        return lines, []
    copies = ", ".join(f"{e['what']} {tuple(e['shape'])} {kb(e['bytes'])}"
                       + (f" (made inside {e['inside']})" if e.get("inside") else "") for e in expanded)
    extra = sum(int(e["bytes"]) for e in expanded)
    lines.append(f"K/V materialised at n_heads={c['n_heads']} heads: {copies}")
    advice = (
        f"K/V copied to all {c['n_heads']} query heads ({kb(extra)} of copies, {g}x the {kb(data['kv_bytes'])} of "
        f"grouped K/V; peak {kb(peak)} vs {kb(base)}): fold each group into the query rows — "
        f"q.reshape(B, n_kv_heads, group * T, d_head) @ k.transpose(-2, -1), or "
        f"einsum('bngtd,bnsd->bngts', q.view(B, n_kv_heads, group, T, d_head), k) — instead of "
        f"repeat_interleave/expand/indexing (a broadcasting matmul over an unsqueezed K copies it too)"
    )
    return lines, [advice]


def judge_kv_work(data: dict) -> tuple[list[str], list[str]]:
    lengths, flops, rows = data["lengths"], data["flops"], data["rows"]
    new_rows = data.get("t_new", 1) * data.get("batch", 1)
    notes: list[str] = []
    steps = "/".join(str(n) for n in lengths)
    work = "/".join(f"{f / 1000:.0f}k" for f in flops)
    deltas = [(flops[i + 1] - flops[i]) / (lengths[i + 1] - lengths[i]) for i in range(len(lengths) - 1)]
    growth = "linear"
    if deltas and deltas[0] > 0 and deltas[-1] > 1.5 * deltas[0] + 1:
        growth = "faster than linear"
        notes.append(
            f"a decode step's work grows faster than linearly with the cache ({work} FLOPs at cache lengths {steps}): "
            f"only the new token's query should attend to the cached keys"
        )
    per_token = f"+{deltas[-1]:.0f} FLOPs per cached token" if deltas else ""
    lines = [f"work audit: decode step at cache length {steps}: {work} FLOPs ({per_token}, {growth})"]
    k_rows = max(rows.get("k_proj", [0]) + rows.get("v_proj", [0]))
    if not any(flops):
        lines.append("work audit: could not measure (no matmul of a decode step was seen, e.g. it ran on another "
                     "thread)")
    if k_rows == 0:
        lines.append("could not measure: k_proj/v_proj were not seen in a decode step (projection rows not counted)")
    elif k_rows > new_rows:
        worst = max(range(len(lengths)), key=lambda i: rows["k_proj"][i] + rows["v_proj"][i])
        notes.append(
            f"past tokens are re-projected: in the decode step at cache length {lengths[worst]}, k_proj saw "
            f"{rows['k_proj'][worst]} rows and v_proj {rows['v_proj'][worst]} for {new_rows} new token: keep the "
            f"rotated K and V in the cache and project only the new tokens"
        )
        lines.append(f"k_proj/v_proj see up to {k_rows} rows per decode step (past tokens recomputed)")
    else:
        lines.append(f"each decode step projects only the new token ({new_rows} row per projection)")
    return lines, notes


def mla_flops_per_cached_token(c: dict) -> dict[str, int]:
    """Matmul FLOPs one more cached token adds to a decode step (batch 1), in each form.

    naive: the latent through kv_b_proj (2 r H (d_n + d_v)), then its key in every head's score
    (2 H (d_n + d_r)) and its value in every head's output (2 H d_v). absorbed: the latent and k_rope
    in every head's score (2 H (r + d_r)) and the latent in every head's weighted sum (2 H r).
    """
    h, r, dn, dr, dv = (c[k] for k in ("n_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                        "v_head_dim"))
    return {"naive": 2 * r * h * (dn + dv) + 2 * h * (dn + dr) + 2 * h * dv, "absorbed": 2 * h * (r + dr) + 2 * h * r}


def judge_mla_work(data: dict) -> tuple[list[str], list[str]]:
    lengths, flops, rows, c = data["lengths"], data["flops"], data["rows"], data["config"]
    steps = "/".join(str(n) for n in lengths)
    work = "/".join(f"{f / 1000:.1f}k" for f in flops)
    slope = (flops[-1] - flops[0]) / (lengths[-1] - lengths[0])
    forms = mla_flops_per_cached_token(c)
    if max(rows) > 0:  # kv_b_proj's weight seen: expanding the cache means a row per cached latent
        naive = max(rows) >= lengths[rows.index(max(rows))]
        how = f"kv_b_proj's weight multiplied {'/'.join(str(n) for n in rows)} rows"
    else:  # the weight was copied (permuted, contiguous) before use: the FLOPs per cached token decide
        naive = abs(slope - forms["naive"]) < abs(slope - forms["absorbed"])
        how = "kv_b_proj's weight not seen (copied first): judged by the FLOPs per cached token"
    form = "naive (expands the whole latent cache through kv_b_proj)" if naive else "absorbed"
    lines = [
        f"decode audit: {form}; a decode step at cache length {steps} costs {work} matmul FLOPs "
        f"(+{slope:.0f} per cached token; naive {forms['naive']}, absorbed {forms['absorbed']} at these sizes)",
        f"decode audit: {how}",
    ]
    notes = []
    if naive:
        ratio = forms["naive"] / max(1, forms["absorbed"])
        notes.append(
            f"each decode step re-expands every cached latent through kv_b_proj (+{slope:.0f} FLOPs per cached "
            f"token, {ratio:.1f}x the absorbed form's {forms['absorbed']}): with W = kv_b_proj.weight.view(H, d_n + "
            f"d_v, r), score q_nope @ W[:, :d_n] against c_kv directly and apply W[:, d_n:] after the softmax"
        )
    return lines, notes


MOE_DENSE_RATIO = 1.5  # FLOPs beyond this multiple of the routed minimum are reported


def moe_minimum_flops(c: dict) -> int:
    """Matmul FLOPs of a routed forward: the router, and each token through top_k experts (three matmuls)."""
    return 2 * c["tokens"] * c["d_model"] * c["n_experts"] + 6 * c["tokens"] * c["top_k"] * c["d_model"] * c["d_ff"]


def judge_moe_work(data: dict) -> tuple[list[str], list[str]]:
    c = data["config"]
    n, e, k = c["tokens"], c["n_experts"], c["top_k"]
    flops, minimum = int(data["flops"]), moe_minimum_flops(c)
    rows = [int(r) // 3 for r in data["rows"]]  # each expert's three weights see the same rows
    norm = data.get("norm_topk_prob")
    convention = f"NORM_TOPK_PROB = {norm}" + ("" if data.get("declared") else " (absent, the default)")
    shape = f"{n} tokens, {e} experts, top_k={k}"
    if flops == 0:
        return [f"routing audit ({shape}, {convention}): could not measure (no matmul of the forward was seen)"], []
    ratio = flops / minimum
    lines = [f"routing audit ({shape}, graded with {convention}): {flops / 1e6:.2f} MFLOPs in matmuls, "
             f"routed minimum {minimum / 1e6:.2f} MFLOPs ({ratio:.1f}x)"]
    notes = []
    seen = sum(rows)
    if seen:
        lines.append(f"experts processed {seen} token rows in all (routed: {n * k} = tokens x top_k)")
    dense_flops = moe_minimum_flops({**c, "top_k": e})  # every token through every expert
    dense = (bool(rows) and min(rows) >= n) or flops >= 0.9 * dense_flops
    if dense:
        what = f"{seen} token rows where routing needs {n * k}" if seen else f"FLOPs of {e} experts per token, not {k}"
        notes.append(
            f"every expert runs on every token ({e} experts x {n} tokens: {what}): "
            f"{flops / 1e6:.2f} MFLOPs against the routed minimum of {minimum / 1e6:.2f} ({ratio:.1f}x); "
            f"run each expert only on its tokens (torch.where(idx == e), or sort the (token, expert) pairs by expert)"
        )
    elif ratio > MOE_DENSE_RATIO:
        notes.append(
            f"the forward spends {flops / 1e6:.2f} MFLOPs in matmuls, {ratio:.1f}x the routed minimum of "
            f"{minimum / 1e6:.2f}: some experts run on tokens not routed to them"
        )
    return lines, notes


# --strict fails a Triton RMSNorm below this share of the device copy measured in the same run. Public
# numbers for a fused Triton RMSNorm: 88% of peak bandwidth (bassrehab/triton-kernels, "From 11% to 88%
# Peak Bandwidth"), 90.9% DRAM throughput under Nsight Compute (an A10G, 4096x4096 fp16), while PyTorch's
# unfused eager RMSNorm reaches ~11-25% (five kernels, x read three times). A device copy moves about 4.3
# TB/s on an H200 (measured on this workplace's machine), 90% of its 4.8 TB/s datasheet peak. 55% of the
# copy (~50% of the datasheet peak) leaves room for a plain one-row-per-program kernel without tuning
# (num_warps, a persistent grid) and fails any launcher that moves each row through HBM more than about
# twice, or that computes with torch ops instead of a kernel.
BANDWIDTH_THRESHOLD = 0.55


def judge_kernel_bandwidth(data: dict) -> tuple[list[str], list[str]]:
    from drill.bench.device import datasheet_bandwidth

    if "skipped" in data:
        return [f"bandwidth audit: not measured ({data['skipped']})"], []
    rate = data["bytes"] / data["median_s"]
    copy = data["copy_bytes"] / data["copy_median_s"]
    sheet = datasheet_bandwidth(str(data.get("device_name", "")), data.get("memory_clock_khz"),
                                data.get("bus_width_bits"))
    share = f"{100 * rate / sheet:.0f}% of the {sheet / 1e9:.0f} GB/s datasheet peak, " if sheet else ""
    lines = [f"bandwidth audit ({data['rows']}x{data['width']} {data['dtype']}, median of CUDA-event timings): "
             f"{rate / 1e9:.0f} GB/s = {share}{100 * rate / copy:.0f}% of a device copy ({copy / 1e9:.0f} GB/s now)"]
    notes = []
    if data.get("launches", 0) == 0:
        notes.append("no @triton.jit kernel was launched by rms_norm: the exercise is a Triton kernel, not torch ops")
    if rate < BANDWIDTH_THRESHOLD * copy:
        notes.append(f"the kernel reaches {100 * rate / copy:.0f}% of the device's copy bandwidth, under "
                     f"{100 * BANDWIDTH_THRESHOLD:.0f}%: read each row once (one program per row, the whole row in "
                     f"registers), write it once, and keep the arithmetic in fp32 registers")
    return lines, notes


def judge_quant_matmul(data: dict) -> tuple[list[str], list[str]]:
    c = data["config"]
    shape = f"M={int(c['m'])} N={int(c['n'])} K={int(c['k'])}"
    products = [p for p in data["products"] if isinstance(p, dict)]
    if not products:
        return [f"product audit ({shape}): could not measure (no matmul or broadcast product was seen)"], []
    ints = [p for p in products if not any(str(t).startswith(("float", "bfloat")) for t in p["dtypes"])]
    floats = [p for p in products if p not in ints]
    dequant = [p for p in floats if not p["integral"]]
    if dequant:
        p = dequant[0]
        what = f"{p['op']} on {', '.join(map(str, p['dtypes']))} holding non-integer values"
    elif floats:
        p = floats[0]
        what = f"{p['op']} on {', '.join(map(str, p['dtypes']))} holding the integer codes"
    else:
        p = ints[0]
        what = f"{p['op']} on {', '.join(map(str, p['dtypes']))}"
    lines = [f"product audit ({shape}): the product ran as {what}"]
    notes = []
    if dequant:
        notes.append("quant_dequant_matmul: int8_matmul multiplies dequantised float values (codes times scales): "
                     "it passes here, but it is a float matmul, not an int8 one; multiply the codes as integers "
                     "(a_q.to(torch.int32) @ b_q.to(torch.int32).T, torch._int_mm on CUDA) and apply a_s and b_s "
                     "to the (M, N) result")
    return lines, notes


PARENT_AUDITS = {"gqa_memory": judge_gqa_memory, "kv_work": judge_kv_work, "moe_work": judge_moe_work,
                 "mla_work": judge_mla_work,
                 "kernel_bandwidth": judge_kernel_bandwidth,
                 "quant_matmul": judge_quant_matmul}


def measured(name: str, data: dict) -> bool:
    """Did the audit observe anything? An audit that saw no work (a forward on a helper thread, where the
    dispatch mode does not reach) must say "could not measure", which fails under --strict."""
    if name == "gqa_memory":
        return int(data.get("peak_bytes", 0)) > 0
    if name == "kv_work":
        rows = data.get("rows", {})
        return any(data.get("flops", [])) and max(rows.get("k_proj", [0]) + rows.get("v_proj", [0])) > 0
    if name == "moe_work":
        return int(data.get("flops", 0)) > 0
    if name == "mla_work":
        return all(int(f) > 0 for f in data.get("flops", [])) and bool(data.get("flops"))
    if name == "quant_matmul":
        return bool(data.get("products"))
    if name == "kernel_bandwidth":
        return "skipped" not in data and float(data.get("median_s", 0)) > 0 and float(data.get("copy_median_s", 0)) > 0
    return True


def judge(name: str, data: Any) -> tuple[list[str], list[str], bool]:
    """(report lines, advisories, measured) for an audit's measurements; malformed data says so instead of crashing."""
    try:
        if name in ON_CASES and isinstance(data, dict) and "cases" in data:
            return _judge_cases(name, data["cases"])
        lines, notes = PARENT_AUDITS[name](data)
        ok = measured(name, data)
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError, AttributeError) as exc:
        return [f"{name} audit: could not measure (unreadable measurements, {type(exc).__name__})"], [], False
    if not ok and name == "gqa_memory":
        lines = ["memory audit: could not measure (no allocation of the forward was seen)"]
    return lines, notes, ok


def _size(name: str, config: dict) -> int:
    if name == "gqa_memory":
        return int(config["batch"]) * int(config["seq"]) * int(config["d_model"])
    return int(config["tokens"]) * int(config["d_model"])


def _judge_cases(name: str, cases: list) -> tuple[list[str], list[str], bool]:
    """The measurements of every measured graded call: the largest call's lines, and the advice of the largest call
    that drew any (a file cannot keep its waste to the calls an audit watches when every graded call is watched).
    Every call must have measured something, or the audit could not measure."""
    if not isinstance(cases, list) or not cases:
        return [f"{name} audit: could not measure (no graded call was measured)"], [], False
    judged = sorted(((_size(name, c["config"]), PARENT_AUDITS[name](c), measured(name, c)) for c in cases),
                    key=lambda item: -item[0])
    lines, notes = list(judged[0][1][0]), list(judged[0][1][1])
    if not notes:
        worst = next(((found, advice) for _, (found, advice), _ in judged if advice), None)
        if worst is not None:
            lines += worst[0]
            notes = list(worst[1])
    lines.append(f"measured during {len(cases)} graded call{'s' * (len(cases) != 1)}, the largest shown first")
    if not all(ok for _, _, ok in judged):
        lines.append(f"{name} audit: could not measure one of the graded calls (no work of it was seen)")
        return lines, notes, False
    return lines, notes, True
