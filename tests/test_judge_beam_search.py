"""beam_search grading: a tiny model built in the child from the case's tensors, passed in as step_logprobs.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here: the reference equals transformers'
`generate` (num_beams, do_sample=False, early_stopping=False, length_penalty, max_new_tokens, eos_token_id) on a
tiny random GPT-2 wrapped as step_logprobs, and greedy decoding for beam_width 1; the spec's knob-free search
agrees with the reference on every case; each seed's cases cover what the contract lists and keep every compared
quantity MARGIN apart; every named mistake's variants differ from the reference on every seed; the model answers
a batch of rows as it answers each row alone; the answer vector grades the score within 1e-4 and tokens exactly;
and through the child: the reference passes with no advisory, a file that calls step_logprobs once per beam passes
with the calls advisory (and fails under --strict), a wrong return type is `wrong_type`, and a failing test shows
both (tokens, score) pairs.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

from drill.judge import beam
from drill.judge.check import check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import beam_search as bs
from drill.reference.beam_search import beam_search

SEEDS = (0, 1, 7, 20261201)
FIXTURES = Path(__file__).parent / "fixtures" / "solutions" / "beam_search"


def _prepared(seed: int) -> list:
    cases = bs.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = bs.reference(c)
    return cases


# ----------------------------------------------------------------------------- the reference against transformers


def _tiny_gpt2(vocab: int, eos_ids: tuple[int, ...], seed: int, sharp: float = 8.0, pulls=(1.0, 1.6)):
    """A randomly initialised GPT-2 of one layer; lm_head scaled by `sharp` and each eos row pulled towards the
    mean hidden state (by `pulls`), so that eos ends some hypotheses."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                  bos_token_id=0, eos_token_id=eos_ids[0], pad_token_id=eos_ids[0])
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharp)
        hidden = model.transformer(torch.randint(0, vocab, (64, 6))).last_hidden_state.reshape(-1, 16)
        mu = hidden.mean(0)
        for e, c in zip(eos_ids, pulls, strict=False):
            model.lm_head.weight[e] = model.lm_head.weight[e] * 0.3 + c * mu / mu.norm() * sharp
    return model


def _hf(model, k: int, lp: float, t_max: int, eos: int) -> tuple[list[int], float | None]:
    with torch.no_grad():
        out = model.generate(torch.tensor([[0]]), num_beams=k, do_sample=False, early_stopping=False,
                             length_penalty=lp, max_new_tokens=t_max, eos_token_id=eos, pad_token_id=eos,
                             output_scores=True, return_dict_in_generate=True, attention_mask=torch.ones(1, 1))
    toks = out.sequences[0, 1:].tolist()
    if eos in toks:
        toks = toks[: toks.index(eos) + 1]
    score = getattr(out, "sequences_scores", None)
    return toks, None if score is None else float(score[0])


def _step(model):
    def step_logprobs(tokens):
        with torch.no_grad():
            return model(tokens).logits[:, -1].float().log_softmax(-1)

    return step_logprobs


# model, beam_width, length_penalty, max_new_tokens, eos: a handful, each a kind of case the spec grades. "sharp0"
# with eos 5 and length_penalty <= 0 ends in eos after a few steps, and with length_penalty > 0 runs to
# max_new_tokens; "sharp1"'s eos 5 is likely at step 1 (an eos-first hypothesis, an early stop); on "soft" the
# textbook search (no early stop) and beam_width candidates per step give other answers than Hugging Face.
MODELS = {"sharp0": dict(seed=0), "sharp1": dict(seed=1), "soft": dict(seed=0, sharp=2.0, pulls=(1.2,))}
HF_CONFIGS = [("sharp0", 2, 1.0, 6, 1), ("sharp0", 3, 0.0, 10, 5), ("sharp0", 2, -1.0, 6, 5), ("sharp0", 4, 2.0, 10, 1),
              ("sharp0", 3, 1.0, 1, 5), ("sharp1", 4, 1.0, 10, 5), ("soft", 3, 2.0, 6, 1), ("soft", 2, 1.0, 6, 1)]


def test_the_reference_equals_transformers_generate() -> None:
    models = {name: _tiny_gpt2(24, (1, 5), **how) for name, how in MODELS.items()}
    ended_eos = ended_max = 0
    for name, k, lp, t_max, eos in HF_CONFIGS:
        model = models[name]
        want, want_score = _hf(model, k, lp, t_max, eos)
        toks, score = beam_search(_step(model), 0, eos, k, t_max, lp)
        assert toks == want, (name, k, lp, t_max, eos)
        assert want_score is not None and abs(score - want_score) <= 1e-4, (name, k, lp, t_max, score, want_score)
        ended_eos += toks[-1] == eos
        ended_max += len(toks) == t_max and toks[-1] != eos
    assert ended_eos >= 3 and ended_max >= 2  # both ways a search ends are cross-checked


def test_beam_width_one_is_transformers_greedy_decoding() -> None:
    model = _tiny_gpt2(24, (1, 5), seed=0)
    for t_max, eos in ((8, 1), (8, 5), (3, 1)):
        want, _ = _hf(model, 1, 1.0, t_max, eos)
        toks, score = beam_search(_step(model), 0, eos, 1, t_max)
        assert toks == want, (t_max, eos)
        step = _step(model)  # the score: the greedy path's own log-prob sum over its length
        total = sum(float(step(torch.tensor([[0] + toks[:i]]))[0, w]) for i, w in enumerate(toks))
        assert abs(score - total / len(toks)) < 1e-5


# ----------------------------------------------------------------------------- the cases


@pytest.mark.parametrize("seed", SEEDS)
def test_the_spec_search_agrees_with_the_reference(seed: int) -> None:
    for c in _prepared(seed):
        toks, score = bs._search(*bs._call(c))
        assert toks == c.ctx["tokens"] and abs(score - c.ctx["score"]) < 1e-9, c.name


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_cover_the_contract_without_near_ties(seed: int) -> None:
    cases = _prepared(seed)
    widths = {c.args["beam_width"] for c in cases}
    penalties = {c.args["length_penalty"] for c in cases}
    assert widths == {1, 2, 3, 4, 5} or (widths >= {1, 2, 3, 5} and len(widths) >= 4), widths
    assert {2.0, 1.0, 0.0, -1.0} <= penalties and any(p < 0 for p in penalties)
    assert any(c.args["max_new_tokens"] == 1 for c in cases)
    assert any(c.extra["default_penalty"] for c in cases)
    ended_eos = ended_max = early = 0
    for c in cases:
        a = c.args
        assert a["emb"].shape[0] >= 2 * a["beam_width"]  # V >= 2 * beam_width
        trace = bs.Trace()
        toks, _ = bs._search(bs._model(c), a["bos_id"], a["eos_id"], a["beam_width"], a["max_new_tokens"],
                             a["length_penalty"], trace=trace)
        assert trace.gap >= bs.MARGIN, c.name
        ended_eos += bool(toks) and toks[-1] == a["eos_id"]
        ended_max += len(toks) == a["max_new_tokens"] and toks[-1] != a["eos_id"]
        early += trace.early
    assert ended_eos >= 5 and ended_max >= 2 and early >= 3
    names = " | ".join(c.name for c in cases)
    for part in ("greedy (beam_width 1) stopped at eos", "at step 1", "at every step", "early stop",
                 "run to max_new_tokens", "between beam_width and 2 * beam_width"):
        assert part in names, part


@pytest.mark.parametrize("seed", SEEDS)
def test_every_named_mistake_shows_on_every_seed(seed: int) -> None:
    cases = _prepared(seed)
    tol = bs.TOLERANCES["beam"]
    shown: dict[str, int] = {}
    for bug in bs.SPEC.bugs:
        n = 0
        for c in cases:
            out = bug.fn(c)
            if out is not None and not compare(out, c.expected, tol, care=c.care).ok:
                n += 1
        shown[bug.diagnosis.id] = max(shown.get(bug.diagnosis.id, 0), n)
    contract = ("beam_no_global_topk beam_identical_start beam_topk_only beam_extends_finished beam_eos_rank "
                "beam_len_counts_bos beam_len_without_eos beam_no_length_penalty beam_returns_running "
                "beam_stop_first_eos beam_no_early_stop beam_sum_probs").split()
    assert sorted(shown) == sorted(contract)
    assert all(n >= 1 for n in shown.values()), shown


def test_the_model_answers_a_batch_as_each_row_alone() -> None:
    c = _prepared(0)[5]
    lm = bs._model(c)
    rows = torch.tensor([[0, 3, 1], [0, 2, 2], [0, 1, 4]])
    together = lm(rows)
    alone = torch.cat([lm(rows[i: i + 1]) for i in range(3)])
    assert together.dtype == torch.float32 and torch.equal(together, alone)
    assert torch.allclose(together.double().exp().sum(-1), torch.ones(3, dtype=torch.float64), atol=1e-5)
    # the whole prefix matters, not only the last token
    assert not torch.equal(lm(torch.tensor([[0, 3, 1]])), lm(torch.tensor([[0, 2, 1]])))
    assert lm.rows == [3, 1, 1, 1, 1, 1]


def test_a_batch_is_bit_for_bit_each_row_alone_on_every_case_model() -> None:
    """The model computes a call's rows in one batch (TinyLM.logprobs); a learner batching its beams otherwise
    than the reference must still see the same bits, so the answers cannot depend on how calls are grouped."""
    gen = torch.Generator().manual_seed(3)
    for c in _prepared(1) + _prepared(7):
        lm = bs._model(c)
        for t in (1, 2, 5, 11):
            rows = torch.randint(0, lm.vocab, (7, t), generator=gen)
            rows[:, 0] = 0
            together = lm.logprobs(rows)
            for i in range(7):
                assert torch.equal(together[i], lm.logprobs(rows[i: i + 1])[0]), (c.name, t, i)


def test_the_answer_vector_grades_the_score_within_1e_4_and_tokens_exactly() -> None:
    c = _prepared(0)[4]
    toks, score = c.ctx["tokens"], c.ctx["score"]
    tol = bs.TOLERANCES["beam"]
    t_max = c.args["max_new_tokens"]

    def ok(t, s, rows=(1, 1)):
        return compare(beam.encode(t, s, t_max, list(rows)), c.expected, tol, care=c.care).ok

    assert ok(toks, score) and ok(toks, score + 0.9e-4) and ok(toks, score, rows=(5, 5, 5, 5, 5, 5, 5, 5))
    assert not ok(toks, score + 1.5e-4)
    other = list(toks)
    other[0] = (other[0] + 1) % c.args["emb"].shape[0]
    assert not ok(other, score) and not ok(toks[:-1], score)
    assert beam.decode(beam.encode(toks, score, t_max, [2, 3]))[:2] == (toks, score)


# ----------------------------------------------------------------------------- through the child


def _grade(path: Path, fork_server, *, strict: bool = False):
    return check_file(path, exercise="beam_search", seed=3, limits=Limits(timeout_s=120, cpu_s=120, memory_mb=2048),
                      pool=fork_server, strict=strict)


def test_the_reference_passes_with_no_advisory(tmp_path: Path, fork_server) -> None:
    path = tmp_path / "beam_search.py"
    path.write_text("import torch\n\n\n" + inspect.getsource(beam_search).replace(
        "def beam_search(step_logprobs, bos_id: int, eos_id: int, beam_width: int, max_new_tokens: int,\n"
        "                length_penalty: float = 1.0) -> tuple[list[int], float]:",
        "def beam_search(step_logprobs, bos_id, eos_id, beam_width, max_new_tokens, length_penalty=1.0):"))
    result = _grade(path, fork_server, strict=True)
    assert result.status == "pass", (result.diagnosis_detail, [t.message for t in result.tests if t.message])
    assert not result.advisories


def test_one_call_per_beam_is_reported_not_failed(fork_server) -> None:
    result = _grade(FIXTURES / "good_per_beam_calls.py", fork_server)
    assert result.status == "pass"
    assert len(result.advisories) == 1 and result.advisories[0].startswith("beam_calls: step_logprobs was called")
    assert "at most 1 rows" in result.advisories[0]
    strict = _grade(FIXTURES / "good_per_beam_calls.py", fork_server, strict=True)
    assert strict.status == "fail" and "advisories" in strict.diagnosis_detail


def test_beam_width_rows_from_the_first_step_is_no_advisory(fork_server) -> None:
    result = _grade(FIXTURES / "good_hf_class.py", fork_server)  # Hugging Face's shape: the copies at -1e9
    assert result.status == "pass" and not result.advisories


def test_a_wrong_return_type_is_named(tmp_path: Path, fork_server) -> None:
    src = (FIXTURES / "good_python_lists.py").read_text()
    path = tmp_path / "beam_search.py"
    path.write_text(src.replace("    return best[1], best[0]", "    return best[0]"))
    result = _grade(path, fork_server)
    assert result.status == "fail" and result.diagnosis.id == "wrong_type", result.diagnosis_detail
    assert "(tokens, score) pair" in result.diagnosis_detail


def test_a_failing_test_shows_both_answers(fork_server) -> None:
    result = _grade(FIXTURES / "bug_beam_no_early_stop__runs_to_max.py", fork_server)
    assert result.status == "fail" and result.diagnosis.id == "beam_no_early_stop"
    failing = [t for t in result.tests if t.status != "pass"]
    assert failing and all("got tokens [" in t.message and "expected [" in t.message for t in failing)


def test_error_sizes_are_the_scores_own(tmp_path: Path, fork_server) -> None:
    """max abs/rel err speak of the score, not of the answer vector whose scale is LENGTH_BASE; a file whose
    tokens are wrong has no error size (a token id's difference means nothing)."""
    src = (FIXTURES / "good_flat_topk.py").read_text()
    assert "    return hyp_tokens[best], hyp_scores[best]\n" in src
    path = tmp_path / "beam_search.py"
    path.write_text(src.replace("return hyp_tokens[best], hyp_scores[best]",
                                "return hyp_tokens[best], hyp_scores[best] + 5e-5"))
    result = _grade(path, fork_server)
    assert result.status == "pass"
    for t in result.tests:
        assert t.max_abs is not None and 4e-5 < t.max_abs < 6e-5, (t.name, t.max_abs)
        assert t.max_rel is not None and t.max_rel > 5e-5 / 100, (t.name, t.max_rel)  # |score| < 100, not / 1e4
    wrong = _grade(FIXTURES / "bug_beam_no_early_stop__runs_to_max.py", fork_server)
    differing = [t for t in wrong.tests if t.status == "fail" and "differ at token" in t.message]
    assert differing and all(t.max_abs is None and t.max_rel is None for t in differing)
