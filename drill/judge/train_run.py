"""Child-side driver of `drill train`: a tiny Llama trained with a chosen set of parts (torch only).

The parent (`drill/judge/train.py`) runs `train` here in its own process with every part the
reference's, and the grader's child runs the same function (this file, loaded by path as a sibling of
child.py, case kind "train") with the learner's parts swapped in. Both get the same tensors: the token
ids, the batches' start offsets, the initial weights and the sampling prompt, so the only difference
between the two runs is whose parts were used.

What travels (case["extra"]): the run's config (sizes, steps, learning rates), the decoder's source
(`decoder.source_for`, the block cut out when the learner's DecoderBlock is used), the reference
parts' source (drill/reference's optim, schedule, clip, loss, sampling and backend, compiled here as
the grader's own code) and the learner's passing files' source by exercise name, compiled here as
untrusted code (file names `<adamw.py>` ...: the audit hook treats them as the learner's). Everything
comes back as tensors: the loss (`out`) and gradient norm of every step (NaN after a stop), the step and the
parameter name (JSON bytes) of the first non-finite value, whether the learner's BPE gave the
reference's ids, the sampled continuation's ids.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

import torch

KIND = "train"
PARTS = ("bpe", "adamw", "lr_schedule", "grad_clip", "decoder_block", "cross_entropy", "sampling")
SPECIALS = ["<|endoftext|>"]
REFERENCE_FILES = ("backend", "optim", "schedule", "clip", "loss", "sampling")
_RELATIVE = re.compile(r"^from \.\w+ import [^\n]*$", re.M)


class ContractError(Exception):
    """Replaced by the child's own ContractError when it loads this file (see child.extension)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def compile_reference(sources: dict[str, str]) -> dict[str, Any]:
    """drill.reference's training parts from their source, in one namespace (relative imports dropped:
    backend's names are in it first). The parent and the child both build their reference parts here."""
    ns: dict[str, Any] = {"__name__": "_drill_train_reference"}
    for name in REFERENCE_FILES:
        code = _RELATIVE.sub("", sources[name])
        exec(compile(code, f"<drill reference {name}>", "exec"), ns)  # noqa: S102 - the grader's own code
    return ns


class Parts:
    """The seven parts one run uses, each the learner's module or None for the reference's."""

    def __init__(self, ref: dict[str, Any], learner: dict[str, Any]) -> None:
        self.ref, self.learner = ref, learner

        def clip_ref(parameters, max_norm, eps=1e-6):
            params = [p for p in parameters if p.grad is not None]
            total, clipped = ref["clip_grad_norm"]([p.grad for p in params], max_norm, eps)
            with torch.no_grad():
                for p, g in zip(params, clipped, strict=True):
                    p.grad.copy_(g)
            return total

        mine = learner.get
        self.AdamW = mine("adamw").AdamW if mine("adamw") else ref["AdamW"]
        self.cosine_lr = mine("lr_schedule").cosine_lr if mine("lr_schedule") else ref["cosine_lr"]
        self.clip = mine("grad_clip").clip_grad_norm_ if mine("grad_clip") else clip_ref
        self.cross_entropy = mine("cross_entropy").cross_entropy if mine("cross_entropy") else ref["cross_entropy"]
        self.filter_logits = mine("sampling").filter_logits if mine("sampling") else ref["filter_logits"]
        self.block = mine("decoder_block")


def _guard(part: str, step: int | None, call, *args: Any, **kwargs: Any):
    """call(*args, **kwargs) of a learner's part; an ordinary exception becomes one line naming the part and
    the step."""
    try:
        return call(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the learner's exception is data; BaseException (traps) passes
        where = f" at step {step}" if step is not None else ""
        line = _learner_line(exc)
        raise ContractError("exception", f"your {part} raised {type(exc).__name__}{where}{line}: {exc}"[:400]) \
            from exc


_TRUSTED: list = []  # the child's `trusted` context (run_case sets it): reading a traceback's frames is audited


def _learner_line(exc: BaseException) -> str:
    """" (adamw.py:37)": the innermost frame of a learner's file in the exception's traceback, or ""."""
    import contextlib
    import traceback

    with (_TRUSTED[0]() if _TRUSTED else contextlib.nullcontext()):
        frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if f.filename.startswith("<") and f.filename.endswith(".py>")]
    return f" ({mine[-1].filename[1:-1]}:{mine[-1].lineno})" if mine else ""


def _number(fn, *args: Any) -> float:
    """fn(*args) as a Python float (a 0-dim tensor or a number); TypeError otherwise."""
    value = fn(*args)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"returned {type(value).__name__}, not a number")


def tokenize(mod: Any, text: str, vocab_size: int, ref_vocab: dict[bytes, int]) -> torch.Tensor:
    """The learner's train_bpe + Tokenizer.encode on the text, as an int64 tensor (contract checked), each id
    renumbered to the reference's id of the same bytes: the contract leaves the numbering free (specials
    first or last), and the same token must meet the same embedding row in both runs. An id whose bytes
    the reference's vocabulary lacks keeps its own number (the run then sees other batches, and says so)."""
    vocab, merges = _guard("bpe", None, mod.train_bpe, text, vocab_size, list(SPECIALS))
    tok = _guard("bpe", None, mod.Tokenizer, vocab, merges, list(SPECIALS))
    ids = _guard("bpe", None, tok.encode, text)
    if not isinstance(ids, list) or not all(type(i) is int and 0 <= i < vocab_size for i in ids):
        raise ContractError("wrong_type", f"your bpe's encode did not return a list of ids below {vocab_size}")
    if not isinstance(vocab, dict) or not all(type(k) is int and type(v) is bytes for k, v in vocab.items()):
        raise ContractError("wrong_type", "your train_bpe's vocabulary is not a dict of int -> bytes")
    renumber = {i: ref_vocab.get(b, i) for i, b in vocab.items()}
    return torch.tensor([renumber.get(i, i) for i in ids], dtype=torch.int64)


def build_model(decoder_ns: dict[str, Any], cfg: dict, init: dict[str, torch.Tensor], block: Any) -> Any:
    """The decoder with the initial weights; the learner's DecoderBlock swapped into every layer if given."""
    model = decoder_ns["Decoder"](cfg["model"], "decoder_block" if block is not None else "train",
                                  cfg.get("convention", "half"))
    model.load_state_dict(init)
    if block is not None:
        _guard("decoder_block", None, model.swap, "decoder_block", block)
    return model


def train(parts: Parts, decoder_ns: dict[str, Any], cfg: dict, tensors: dict[str, torch.Tensor],
          progress: Any = None, ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Run the loop; returns the tensors described in the module docstring."""
    torch.manual_seed(int(cfg["seed"]))
    init = {k[len("init."):]: v.clone() for k, v in tensors.items() if k.startswith("init.")}
    model = build_model(decoder_ns, cfg, init, parts.block)
    ids = tensors["ids"] if ids is None else ids
    starts, t = tensors["starts"], int(cfg["seq_len"])
    steps = int(cfg["steps"])
    limit = max(len(ids) - t - 1, 1)
    named = list(model.named_parameters())
    opt = _guard("adamw", None, parts.AdamW, [p for _, p in named], lr=cfg["max_lr"], betas=tuple(cfg["betas"]),
                 eps=1e-8, weight_decay=cfg["weight_decay"])
    losses = torch.full((steps,), math.nan, dtype=torch.float64)
    norms = torch.full((steps,), math.nan, dtype=torch.float64)
    bad_step, bad_what = -1, ""
    vocab = cfg["model"]["vocab_size"]
    model.train()
    for step in range(int(cfg.get("steps_run", steps))):  # attribution runs stop early
        lr = _guard("lr_schedule", step, _number, parts.cosine_lr, step, cfg["max_lr"], cfg["min_lr"], cfg["warmup"],
                    steps)
        for group in opt.param_groups:
            group["lr"] = lr
        rows = starts[step] % limit
        x = torch.stack([ids[r:r + t] for r in rows.tolist()])
        y = torch.stack([ids[r + 1:r + t + 1] for r in rows.tolist()])
        logits = _guard("decoder_block", step, model, x)
        loss = _guard("cross_entropy", step, parts.cross_entropy, logits.reshape(-1, vocab), y.reshape(-1))
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ContractError("wrong_type", f"your cross_entropy returned {type(loss).__name__} at step {step}")
        value = float(loss.detach())
        losses[step] = value
        if not math.isfinite(value):
            bad_step, bad_what = step, "the loss"
            break
        opt.zero_grad(set_to_none=True)
        _guard("cross_entropy or decoder_block (backward)", step, loss.backward)
        norms[step] = _guard("grad_clip", step, _number, parts.clip, (p for _, p in named), cfg["clip"])
        _guard("adamw", step, opt.step)
        bad = next((n for n, p in named if not bool(torch.isfinite(p.detach()).all())), None)
        if bad is not None:
            bad_step, bad_what = step, bad
            break
        if progress is not None:
            progress(step + 1)
    sample = _sample(model, parts, tensors["prompt"], cfg) if bad_step < 0 else torch.zeros(0, dtype=torch.int64)
    return {"out": losses, "norms": norms, "bad_step": torch.tensor([bad_step]),
            "bad_what": torch.tensor(list(bad_what.encode()[:400]), dtype=torch.uint8), "sample": sample}


@torch.no_grad()
def _sample(model: Any, parts: Parts, prompt: torch.Tensor, cfg: dict) -> torch.Tensor:
    """A continuation of `prompt`: filter_logits' probabilities, one seeded multinomial draw per token."""
    model.eval()
    gen = torch.Generator().manual_seed(int(cfg["seed"]))
    seq = prompt.view(1, -1)
    s = cfg["sample"]
    for _ in range(int(s["tokens"])):
        logits = _guard("decoder_block", None, model, seq[:, -int(cfg["seq_len"]):])[:, -1].float()
        probs = _guard("sampling", None, parts.filter_logits, logits, temperature=s["temperature"], top_k=s["top_k"],
                       top_p=s["top_p"])
        if not isinstance(probs, torch.Tensor) or probs.shape != logits.shape:
            raise ContractError("wrong_type", "your filter_logits did not return probabilities of the logits' shape")
        nxt = torch.multinomial(probs.double().clamp_min(0), 1, generator=gen)
        seq = torch.cat([seq, nxt], dim=1)
    return seq[0, prompt.numel():].clone()


def load_learner(name: str, source: str) -> Any:
    """A learner's file, compiled from the source the parent sent, as a fresh module (untrusted)."""
    import types

    mod = types.ModuleType(f"learner_{name}")
    mod.__file__ = f"<{name}.py>"
    sys.modules[mod.__name__] = mod
    exec(compile(source, f"<{name}.py>", "exec"), mod.__dict__)  # noqa: S102 - runs under the child's traps
    return mod


def run_case(mod: Any, case: dict, tensors: dict, host: Any) -> dict[str, torch.Tensor]:
    """The child's entry for a "train" case: the learner's files loaded, the run made with them."""
    host._sibling("optim")  # Optimizer's dynamo wrappers off (see optim.py), as in the parent
    _TRUSTED[:] = [host.trusted]
    extra = case["extra"]
    with host.trusted():
        ref = compile_reference(extra["reference"])
        decoder_ns: dict[str, Any] = {"__name__": "_drill_judge_decoder"}
        exec(compile(extra["decoder"], "<drill decoder>", "exec"), decoder_ns)  # noqa: S102 - the parent's code
    learner = {}
    for name, source in extra["learner"].items():
        learner[name] = _guard(name, None, load_learner, name, source)
    cfg = extra["config"]
    out: dict[str, torch.Tensor] = {}
    ids = None
    if "bpe" in learner:
        text = bytes(tensors["text"].tolist()).decode("utf-8")
        raw = json.loads(bytes(tensors["ref_vocab"].tolist()).decode("ascii"))
        ref_vocab = {bytes.fromhex(h): int(i) for i, h in raw.items()}
        ids = tokenize(learner["bpe"], text, int(cfg["model"]["vocab_size"]), ref_vocab)
        same = ids.shape == tensors["ids"].shape and bool(torch.equal(ids, tensors["ids"]))
        out["bpe_same"] = torch.tensor([int(same)])
    out.update(train(Parts(ref, learner), decoder_ns, cfg, tensors, ids=ids))
    return out


def describe(cfg: dict) -> str:
    """One line of the run's sizes, for the report."""
    m = cfg["model"]
    return (f"{m['num_hidden_layers']} layers, d_model {m['hidden_size']}, vocab {m['vocab_size']}, "
            f"{cfg['steps']} steps of {cfg['batch']} x {cfg['seq_len']} tokens")


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
