"""`drill train DIR`: a tiny Llama trained with the learner's own parts, beside the reference's run.

The parts are `PARTS`, each an exercise of its own. Each file of DIR named for one of them is
graded first (`client.grade`, the warm server when it can be used) and used only if it passes; the
reference's part stands in for every other. The text is drill's own question bank and exercise docs
(shipped in the package), tokenized by the reference's BPE in this process and, when the learner's
bpe is used, by theirs in the child.

Two runs, the same seed, batches and initial weights: the reference's, in this process (drill's own
code, trusted), and the learner's, in the grader's sandboxed child (`train_run.run_case`, case kind
"train"), at the same time, one core each. The child sends back tensors only; the verdict is made
here: the learner's loss must stay within `BAND` (relative) of the reference's at every step. When it
does not, each learner part is swapped back for the reference's in turn, in runs cut at the first step
out of band, and the part whose swap brings the run back in band is named.
"""

from __future__ import annotations

import ast
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from drill.errors import UserError
from drill.judge.limits import Limits

PARTS = ("bpe", "adamw", "lr_schedule", "grad_clip", "decoder_block", "cross_entropy", "sampling")
# The order to write them in when none passes: the short ones first, each used by the run on its own.
FIRST = ("lr_schedule", "grad_clip", "cross_entropy", "adamw", "sampling", "bpe", "decoder_block")
# Relative difference |yours - reference| / reference allowed at every step (see README, "drill train").
BAND = 0.01
PROMPT = "The KV cache stores"

_MODEL = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
          "max_position_embeddings": 256}
SIZES: dict[str, dict[str, Any]] = {
    "default": {"model": _MODEL, "steps": 300, "batch": 16, "seq_len": 64, "text_chars": 200_000,
                "max_lr": 3e-3, "min_lr": 3e-4, "warmup": 20, "clip": 1.0, "weight_decay": 0.1,
                "betas": [0.9, 0.95], "sample": {"tokens": 40, "temperature": 0.8, "top_k": 50, "top_p": 0.95}},
    "tiny": {"model": {**_MODEL, "vocab_size": 300, "hidden_size": 32, "intermediate_size": 96,
                       "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1},
             "steps": 24, "batch": 4, "seq_len": 32, "text_chars": 20_000,
             "max_lr": 3e-3, "min_lr": 3e-4, "warmup": 4, "clip": 1.0, "weight_decay": 0.1,
             "betas": [0.9, 0.95], "sample": {"tokens": 12, "temperature": 0.8, "top_k": 50, "top_p": 0.95}},
}


@dataclass
class PartUse:
    """One part: whose it was in the run, and why."""

    name: str
    file: str | None = None
    mine: bool = False
    why: str = "no file"


@dataclass
class RunResult:
    """One run's answer (the reference's, or one of the learner's)."""

    losses: list[float]
    norms: list[float]
    bad_step: int = -1
    bad_what: str = ""
    sample: list[int] = field(default_factory=list)
    bpe_same: bool | None = None
    failure: str | None = None  # the run stopped: a limit, a crash, a part's exception


@dataclass
class TrainReport:
    """Everything `drill train` shows, and its exit code."""

    config: dict
    parts: list[PartUse]
    reference: RunResult
    yours: RunResult
    band: float = BAND
    first_out: int | None = None  # first step out of band (0-based index; shown 1-based, as every step is)
    worst: float = 0.0  # largest relative difference over the steps compared
    culprits: list[str] | None = None  # parts whose swap brought the run back in band
    sample_text: str = ""
    reference_sample_text: str = ""
    wall_s: float = 0.0
    verdict: str = ""
    checked: bool = True  # the part files were graded first (not --no-check)

    @property
    def passed(self) -> bool:
        return self.first_out is None and self.yours.failure is None and self.yours.bad_step < 0


def corpus(chars: int) -> str:
    """drill's own question bank and exercise docs (MIT, shipped in the package), documents joined by the
    end-of-text token, clipped to `chars` characters."""
    docs = []
    for package, pattern in (("drill.exercises", "README.md"), ("drill.questions", "*.yaml")):
        root = resources.files(package)
        docs += [p.read_text(encoding="utf-8") for p in sorted(root.iterdir(), key=lambda p: p.name)
                 if Path(p.name).match(pattern)]
    return "<|endoftext|>".join(docs)[:chars]


def find_parts(folder: Path) -> list[PartUse]:
    """The part files present in `folder` (`<exercise>.py`)."""
    if not folder.is_dir():
        raise UserError("not a folder", str(folder))
    return [PartUse(name, str(folder / f"{name}.py") if (folder / f"{name}.py").is_file() else None)
            for name in PARTS]


def grade_parts(parts: list[PartUse], seed: int | None, check: bool, pool: Any = None,
                into: list[PartUse] | None = None) -> None:
    """Grade every present file (the check's API, the warm server when it can be used); keep those that pass.
    `pool` (a pool.ChildPool, tests): each file graded in-process through it instead. `into`: the PartUse
    list to write the verdicts into (the learner's own paths), when `parts` names copies of the files.
    Without the check (--no-check) the static policy (layer 1) still refuses a file, as `drill check` would."""
    present = [p for p in parts if p.file]
    shown = {p.name: p for p in (into if into is not None else parts)}
    if not check:
        from drill.judge import registry
        from drill.judge.check import _refusal
        from drill.judge.source import read_source

        for p in present:
            try:
                refused = _refusal(read_source(Path(p.file)), Path(p.file), registry.entry(p.name), True)
            except UserError as exc:  # not decodable as Python reads it
                refused = ("unreadable", str(exc).split(": ", 1)[-1])
            if refused is None:
                shown[p.name].mine, shown[p.name].why = True, "used without a check (--no-check)"
            else:
                shown[p.name].why = f"refused ({refused[0]}: {refused[1]}): the reference's was used"[:300]
        return
    from drill.judge.client import Job, grade

    jobs = [Job(Path(p.file), p.name, seed) for p in present]
    if pool is not None:
        results = [grade([job], use_server=False, pool=pool)[0] for job in jobs]
    else:
        results = grade(jobs)
    for p, r in zip(present, results, strict=True):
        if r.status == "pass":
            shown[p.name].mine, shown[p.name].why = True, f"passed its check ({r.passed}/{r.total})"
        else:
            failed = r.diagnosis.title if r.diagnosis else r.status
            shown[p.name].why = f"failed its check ({failed}): the reference's was used"


def no_parts_message(parts: list[PartUse]) -> str:
    """What to write first when none of the learner's parts can be used: the first of FIRST (short ones first)
    among the files that failed their check, else among those missing."""
    present = {p.name for p in parts if p.file}
    failing = [n for n in FIRST if n in present]
    uses = f"drill train uses any of {', '.join(PARTS)} that pass"
    if failing:
        first = failing[0]
        return (f"none of your parts passes its check yet: write {first}.py first (`drill check DIR/{first}.py` "
                f"says what fails); {uses}")
    first = FIRST[0]
    return (f"no part of yours is in the folder: write {first}.py first (`drill start {first} DIR`, then "
            f"`drill check DIR/{first}.py`); {uses}")


def block_convention(path: str | None) -> str:
    """The learner's DecoderBlock's declared CONVENTION (a module-level string), "half" when absent or odd."""
    if not path:
        return "half"
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (SyntaxError, ValueError, OSError):
        return "half"
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONVENTION"
                                                 for t in node.targets)
                and isinstance(node.value, ast.Constant) and node.value.value in ("half", "interleaved")):
            return node.value.value
    return "half"


def reference_sources() -> dict[str, str]:
    """drill/reference's training parts as source, for `train_run.compile_reference` (both sides)."""
    from drill.judge.train_run import REFERENCE_FILES

    root = resources.files("drill.reference")
    return {name: root.joinpath(f"{name}.py").read_text(encoding="utf-8") for name in REFERENCE_FILES}


def prepare(config: dict, seed: int) -> tuple[dict[str, Any], Any]:
    """The shared tensors (ids, batch offsets, initial weights, prompt, text) and the reference tokenizer."""
    import torch

    from drill.judge import decoder
    from drill.judge.train_run import SPECIALS
    from drill.reference import bpe

    text = corpus(int(config["text_chars"]))
    vocab_size = int(config["model"]["vocab_size"])
    vocab, merges = bpe.train_bpe(text, vocab_size, list(SPECIALS))
    tok = bpe.Tokenizer(vocab, merges, list(SPECIALS))
    ids = torch.tensor(tok.encode(text), dtype=torch.int64)
    gen = torch.Generator().manual_seed(seed)
    room = max(len(ids) - int(config["seq_len"]) - 1, 1)
    starts = torch.randint(0, room, (int(config["steps"]), int(config["batch"])), generator=gen)
    torch.manual_seed(seed)
    model = decoder.Decoder(config["model"], "train", config.get("convention", "half"))
    init = {f"init.{k}": v.detach().clone() for k, v in model.state_dict().items()}
    prompt = torch.tensor(tok.encode(PROMPT), dtype=torch.int64)
    tensors = {"ids": ids, "starts": starts, "prompt": prompt, **init,
               "text": torch.tensor(list(text.encode("utf-8")), dtype=torch.uint8),
               "ref_vocab": torch.tensor(list(json.dumps({str(i): b.hex() for i, b in vocab.items()}).encode()),
                                         dtype=torch.uint8)}
    return tensors, tok


def _result(out: dict[str, Any]) -> RunResult:
    from drill.judge.boundary import safe_text

    what = bytes(out["bad_what"].tolist()).decode("utf-8", "replace") if "bad_what" in out else ""
    same = out.get("bpe_same")
    return RunResult([float(v) for v in out["out"].tolist()], [float(v) for v in out["norms"].tolist()],
                     int(out["bad_step"].reshape(-1)[0]), safe_text(what, 200),
                     [int(i) for i in out["sample"].tolist()], None if same is None else bool(int(same[0])))


def reference_run(config: dict, tensors: dict, progress: Callable[[int], None] | None = None) -> RunResult:
    """The reference's run in this process, on one thread, with the code the child runs."""
    import torch

    from drill.judge import decoder, optim  # noqa: F401 - optim: Optimizer's dynamo wrappers off, as in the child
    from drill.judge.train_run import Parts, compile_reference, train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = train(Parts(compile_reference(reference_sources()), {}), vars(decoder), config, tensors, progress)
    finally:
        torch.set_num_threads(threads)
    return _result(out)


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


_STUB = '"""drill train: the parts travel in the job; this file only stands where a checked file would."""\n'


def start_learner_run(config: dict, tensors: dict, sources: dict[str, str], limits: Limits, pool: Any = None) -> Any:
    """Start the child with the learner's parts and hand it the job; returns the child (wait with finish)."""
    import tempfile

    from drill.judge.decoder import source_for
    from drill.judge.runner import Child
    from drill.judge.sandbox import harden_parent

    harden_parent()
    stub_dir = Path(tempfile.mkdtemp(prefix="drill-train-"))
    stub = stub_dir / "drill_train.py"
    stub.write_text(_STUB, encoding="utf-8")
    child = pool.child(limits, learner=stub) if pool is not None else Child(limits, learner=stub)
    child.stub_dir = stub_dir
    case = {"index": 0, "target": "train", "kind": "train", "arg_names": [], "args": [], "grad_inputs": [],
            "grad_params": False,
            "extra": {"config": config, "learner": sources, "reference": reference_sources(),
                      "decoder": source_for("decoder_block" if "decoder_block" in sources else "train")}}
    job = {"learner": str(stub), "graded": [], "forbidden": [], "forbidden_classes": [], "report_attrs": [],
           "cases": [case]}
    sent = {k: v for k, v in tensors.items() if k not in ("text", "ref_vocab") or "bpe" in sources}
    child.send(job, sent)
    return child


def finish_learner_run(child: Any) -> RunResult:
    """Wait for the child; its outputs through the boundary, or the reason the run stopped."""
    import shutil

    from drill.judge.boundary import load_outputs, safe_text
    from drill.judge.check import _run_failure

    try:
        outcome = child.wait()
        failure = _run_failure(outcome.events, outcome, child, [_Named("the training run")])
        end = next((e for e in outcome.events if e.get("event") == "end"), None)
        if failure is None and (end is None or end.get("status") != "ok"):
            from drill.judge.diagnose import where

            detail = (end or {}).get("message") or "the run ended without an answer"
            failure = ("exception", f"{safe_text(detail, 400)}{where(end) if end else ''}")
        if failure is not None:
            return RunResult([], [], failure=f"{failure[0]}: {failure[1]}")
        try:
            return _result(load_outputs(child.output_file("out_0.bin")))
        except Exception as exc:  # noqa: BLE001 - a malformed answer is the run's failure, never a pass
            return RunResult([], [], failure=f"crashed: unreadable answer ({safe_text(str(exc), 200)})")
    finally:
        child.cleanup()
        shutil.rmtree(getattr(child, "stub_dir", ""), ignore_errors=True)


def learner_run(config: dict, tensors: dict, sources: dict[str, str], limits: Limits, pool: Any = None) -> RunResult:
    return finish_learner_run(start_learner_run(config, tensors, sources, limits, pool))


def rel_diffs(yours: list[float], ref: list[float]) -> list[float]:
    """|yours - ref| / |ref| per step (inf where yours is not finite)."""
    out = []
    for a, b in zip(yours, ref, strict=False):
        out.append(abs(a - b) / max(abs(b), 1e-12) if math.isfinite(a) and math.isfinite(b) else math.inf)
    return out


def first_out_of_band(run: RunResult, ref: RunResult, band: float, steps: int) -> tuple[int | None, float]:
    """(first step out of band or None, worst relative difference) over the first `steps` steps."""
    diffs = rel_diffs(run.losses[:steps], ref.losses[:steps])
    if len(diffs) < steps:
        diffs += [math.inf] * (steps - len(diffs))
    if run.bad_step >= 0 and run.bad_step < steps:
        diffs[run.bad_step] = math.inf
        diffs = diffs[:run.bad_step + 1]
    worst = max(diffs) if diffs else 0.0
    first = next((i for i, d in enumerate(diffs) if d > band), None)
    return first, worst


def attribute(config: dict, tensors: dict, sources: dict[str, str], ref: RunResult, first: int, band: float,
              limits: Limits, say: Callable[[str], None], pool: Any = None) -> list[str]:
    """The parts whose swap for the reference's brings the run back in band up to step `first`."""
    cut = {**config, "steps_run": first + 1}
    back = []
    for name in sources:
        say(f"swapping your {name} for the reference's ...")
        rest = {k: v for k, v in sources.items() if k != name}
        run = learner_run(cut, tensors, rest, limits, pool) if rest else ref
        if run.failure is None and first_out_of_band(run, ref, band, first + 1)[0] is None:
            back.append(name)
    return back


def run_train(folder: str | Path, *, size: str = "default", seed: int | None = None, steps: int | None = None,
              check: bool = True, limits: Limits | None = None, say: Callable[[str], None] = lambda s: None,
              progress: Callable[[int, int], None] | None = None, pool: Any = None) -> TrainReport:
    """The whole `drill train`: grade, prepare, both runs at once, verdict, attribution. UserError on bad input.

    `pool` (a pool.ChildPool): the fork server every run of the learner's parts is forked from (and the checks
    graded through); by default one of its own for this call, so the attribution's runs cost a fork each,
    not an interpreter and a torch import each."""
    if pool is None:
        from drill.judge.pool import ChildPool

        with ChildPool() as own:
            return run_train(folder, size=size, seed=seed, steps=steps, check=check, limits=limits, say=say,
                             progress=progress, pool=own)
    t0 = time.monotonic()
    if size not in SIZES:
        raise UserError(f"unknown --size {size!r}: one of {', '.join(SIZES)}")
    parts = find_parts(Path(folder))
    if not any(p.file for p in parts):
        raise UserError(no_parts_message(parts), str(folder))
    import tempfile

    copies = Path(tempfile.mkdtemp(prefix="drill-train-parts-"))
    try:
        return _run_copied(Path(folder), parts, copies, size=size, seed=seed, steps=steps, check=check,
                           limits=limits, say=say, progress=progress, pool=pool, t0=t0)
    finally:
        import shutil

        shutil.rmtree(copies, ignore_errors=True)


def _run_copied(folder: Path, parts: list[PartUse], copies: Path, *, size: str, seed: int | None,
                steps: int | None, check: bool, limits: Limits | None, say: Callable[[str], None],
                progress: Callable[[int, int], None] | None, pool: Any, t0: float) -> TrainReport:
    """run_train on copies of the part files: what was graded is what runs, whatever the folder does meanwhile."""
    import shutil

    graded = {}
    for p in parts:
        if p.file:
            graded[p.name] = copies / f"{p.name}.py"
            shutil.copyfile(p.file, graded[p.name])
    grade_parts([PartUse(p.name, str(graded[p.name]) if p.file else None) for p in parts], seed, check, pool,
                into=parts)
    if not any(p.mine for p in parts):
        raise UserError(no_parts_message(parts), str(folder))
    config = dict(SIZES[size])
    if steps is not None:
        if steps < 2:
            raise UserError("--steps must be at least 2")
        config["steps"] = steps
    config["warmup"] = min(int(config["warmup"]), int(config["steps"]) - 1)
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    config["seed"] = seed
    block = next(p for p in parts if p.name == "decoder_block")
    config["convention"] = block_convention(str(graded["decoder_block"])) if block.mine else "half"
    config["model"] = dict(config["model"])
    from drill.judge.source import read_source

    sources = {p.name: read_source(graded[p.name]) for p in parts if p.mine}
    tensors, tok = prepare(config, seed)
    limits = limits or Limits(timeout_s=600.0, cpu_s=600.0, memory_mb=2048)
    say("training: the reference's run here, yours in a sandboxed process, at the same time")
    child = start_learner_run(config, tensors, sources, limits, pool)
    try:
        total = int(config["steps"])
        ref = reference_run(config, tensors, (lambda i: progress(i, total)) if progress else None)
    except BaseException:
        child.cleanup()
        raise
    yours = finish_learner_run(child)
    report = TrainReport(config, parts, ref, yours, checked=check)
    report.reference_sample_text = tok.decode(ref.sample)
    if yours.failure is None:
        report.first_out, report.worst = first_out_of_band(yours, ref, BAND, total)
        try:
            report.sample_text = tok.decode(yours.sample)
        except (KeyError, ValueError, TypeError):
            report.sample_text = "(not decodable by the reference's tokenizer)"
    if yours.failure is None and report.first_out is not None:
        report.culprits = attribute(config, tensors, sources, ref, report.first_out, BAND, limits, say, pool)
    report.verdict = verdict(report)
    report.wall_s = time.monotonic() - t0
    return report


def verdict(r: TrainReport) -> str:
    """The one-paragraph verdict."""
    if r.yours.failure is not None:
        return f"your run stopped: {r.yours.failure}"
    lines = []
    if r.yours.bpe_same is False:
        lines.append("your bpe tokenized the text differently from the reference's (the batches differ)")
    if r.yours.bad_step >= 0:
        what = r.yours.bad_what
        lines.append(f"step {r.yours.bad_step + 1}: {what} became NaN or infinite"
                     + ("" if what == "the loss" else " after the optimizer's step"))
    elif r.first_out is None:
        return (f"in band: your loss stayed within {r.band:.0%} of the reference's at every one of the "
                f"{len(r.reference.losses)} steps (largest difference {r.worst:.2%})")
    else:
        ref, mine = r.reference.losses[r.first_out], r.yours.losses[r.first_out]
        lines.append(f"out of band from step {r.first_out + 1}: your loss {mine:.4f} vs the reference's {ref:.4f} "
                     f"(more than {r.band:.0%} apart)")
    if r.culprits is not None:
        if len(r.culprits) == 1:
            lines.append(f"the part that made it diverge: your {r.culprits[0]} (with the reference's in its "
                         "place the run stays in band)")
        elif r.culprits:
            lines.append(f"swapping any one of {', '.join(r.culprits)} back brings the run into band")
        else:
            lines.append("no single part: swapping any one of yours back does not bring the run into band")
    return "; ".join(lines)
