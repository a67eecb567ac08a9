"""bpe grading: the reference against a brute-force recount and GPT-2's pattern, the "exact" case kind, the cases.

Fixture verdicts (every good file passes, every bug file is named) are checked by test_judge_fixtures.py;
here: drill.reference.bpe equals the plain recount (and the spec's knob model with every knob at the contract)
on the hidden texts of several seeds, CS336's example and the contract's tie rule, PAT is GPT-2's split, each
seed has the forms the contract names, every mistake's variant fails a test on every seed, the exact kind's
codec and its messages, and a file that is too slow is stopped and named.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import regex
import torch

from drill.judge import exact
from drill.judge.check import check_file
from drill.judge.runner import Limits
from drill.judge.specs import bpe as spec
from drill.reference import bpe as ref

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "bpe"
SEEDS = (0, 1, 20261201)


def _train_args(case) -> tuple:
    args = case.extra["exact"]["steps"][0]["args"]
    return tuple(exact.decode(a["v"], a["s"]) for a in args)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reference_equals_a_brute_force_recount_and_the_knob_model(seed: int) -> None:
    seen = set()
    for case in spec.make_cases(seed):
        if case.ctx.get("speed") or case.extra["exact"]["steps"][0].get("call") != "train_bpe":
            continue
        text, size, specials = _train_args(case)
        if (text, size, tuple(specials)) in seen:
            continue
        seen.add((text, size, tuple(specials)))
        fast = ref.train_bpe(text, size, specials)
        assert fast == ref.train_bpe_recount(text, size, specials), case.name
        assert fast == spec._train(text, size, tuple(specials)), case.name


def test_the_reference_equals_the_recount_on_a_larger_text() -> None:
    import random

    text = spec.english_like(random.Random(5), 20_000, (spec.EOT,), 0.01)
    assert ref.train_bpe(text, 700, [spec.EOT]) == ref.train_bpe_recount(text, 700, [spec.EOT])


def test_cs336_example_and_the_tie_rule() -> None:
    vocab, merges = ref.train_bpe(spec.CS336_TEXT, 256 + 1 + 6, ["<|endoftext|>"])
    assert merges[:2] == [(b"s", b"t"), (b"e", b"st")]
    assert vocab[256] == b"st" and vocab[256 + 6] == b"<|endoftext|>" and len(vocab) == 263
    # The contract's example: equally frequent (A,B), (A,C), (B,ZZ), (BA,A): max((count, pair)) picks (BA, A).
    tied = [(b"A", b"B"), (b"A", b"C"), (b"B", b"ZZ"), (b"BA", b"A")]
    assert max(tied) == (b"BA", b"A") and max(tied, key=lambda p: p[0] + p[1]) == (b"B", b"ZZ")


def test_pat_is_gpt2s_split() -> None:
    # GPT-2's encoder.py splits this way (contractions, a leading space kept with the word, digits, symbols,
    # whitespace runs with the last space left for the next word); checked by hand, tiktoken is not installed.
    assert spec.PAT.pattern == ref.PAT
    text = "Hello world's  42 apples!!\n\n  café 🙂 it'll"
    assert regex.findall(ref.PAT, text) == ["Hello", " world", "'s", " ", " 42", " apples", "!!", "\n\n ", " café",
                                            " 🙂", " it", "'ll"]


def test_below_256_plus_specials_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"at least 256 \+ len\(special_tokens\) = 257"):
        ref.train_bpe("abc", 256, ["<|endoftext|>"])


def test_tokenizer_rules() -> None:
    vocab, merges = ref.train_bpe("aaaa aaa " * 5, 256 + 4, [])
    tok = ref.Tokenizer(vocab, merges, ["<|a|>", "<|a|><|a|>"])
    ids = tok.encode("<|a|><|a|><|a|>aaa")
    assert ids[:2] == [len(vocab) + 1, len(vocab)]  # the longest special token first, new ids in order
    assert tok.decode(ids) == "<|a|><|a|><|a|>aaa"
    assert ref.Tokenizer({0: b"\xc3", 1: b"\xa9"}, []).decode([0, 1]) == "é"
    dup = ref.Tokenizer({**{i: bytes([i]) for i in range(256)}, 256: b"a"}, [])
    assert dup.encode("a") == [97]  # two ids with the same bytes: the lower one


@pytest.mark.parametrize("seed", SEEDS)
def test_each_seed_has_the_forms_the_contract_names(seed: int) -> None:
    cases = spec.make_cases(seed)
    names = " | ".join(c.name for c in cases)
    for form in ("CS336's example", "ties everywhere", "unicode", "'aaaa' overlaps", "both edges and overlapping",
                 "no special tokens", "grader's vocab", "your own vocab", "lacks gets the next free id",
                 "multi-byte characters cut", "decode(encode(", "speed: train_bpe"):
        assert form in names, form
    sizes = [_train_args(c)[1] for c in cases if c.extra["exact"]["steps"][0].get("call") == "train_bpe"
             and not c.ctx.get("speed")]
    train, encode = cases[-2:]
    assert min(sizes) < 256 + 20 and train.ctx.get("speed") and encode.ctx.get("report") == "encode"
    assert train.judge is not None and len(_train_args(train)[0]) >= 500_000  # the contract's 500 KB
    text = exact.decode(encode.extra["exact"]["steps"][1]["args"][0]["v"], "str")
    assert len(text) == spec.ENCODE_CHARS  # the contract's 200 KB


@pytest.mark.parametrize("seed", range(16))
def test_the_rank_case_separates_a_by_frequency_encode_on_every_seed(seed: int) -> None:
    """Seed 3 once drew three words whose (b, a) and (a, b) counts tie, and a by-frequency encode breaking
    ties by rank passed every test: this case alone must tell the two apart."""
    case = next(c for c in spec.make_cases(seed) if c.name.startswith("rank, not frequency"))
    case.expected, _ = spec.reference(case)
    bug = next(b for b in spec.SPEC.bugs if b.diagnosis.id == "bpe_encode_by_frequency")
    assert not torch.equal(bug.fn(case), case.expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_fails_some_test_on_every_seed(seed: int) -> None:
    cases = [c for c in spec.make_cases(seed) if not c.ctx.get("speed")]
    for c in cases:
        c.expected, _ = spec.reference(c)
    for bug in spec.SPEC.bugs:
        off = [c.name for c in cases if (v := bug.fn(c)) is not None and not torch.equal(v, c.expected)]
        assert off, f"{bug.diagnosis.id} ({bug.label}) changes no test on seed {seed}"


def test_the_exact_codec_round_trips_and_names_the_wrong_type() -> None:
    value = ({0: b"\x00", 300: b"th"}, [(b" t", b"he"), (b"a", b"b")])
    schema = ["tuple", spec.VOCAB, spec.MERGES]
    assert exact.decode(exact.encode(value, schema), schema) == value
    assert exact.answer(exact.to_tensor(exact.encode(value, schema))) == exact.encode(value, schema)
    with pytest.raises(exact.ContractError, match=r"train_bpe\[1\]\[1\]\[0\] is str"):
        exact.encode(({0: b"a"}, [(b"a", b"b"), ("a", b"b")]), schema, "train_bpe")
    with pytest.raises(exact.ContractError, match="is bool"):
        exact.encode([1, True], spec.IDS)


def test_the_exact_messages_say_what_differs() -> None:
    want = exact.encode([(b" t", b"he")] * 17 + [(b" t", b"he")], spec.MERGES)
    got = exact.encode([(b" t", b"he")] * 17 + [(b" th", b"e")], spec.MERGES)
    c = exact.compare_answers(got, want, spec.MERGES, "merge", "merges")
    assert not c.ok and "merge 17: got (b' th', b'e'), expected (b' t', b'he')" in c.message
    c = exact.compare_answers([1, 2, 3], [1, 2, 4, 5], spec.IDS, "id", "ids")
    assert "id 2: got 3, expected 4" in c.message and "3 ids, expected 4" in c.message
    c = exact.compare_answers([1, 2], [1, 2, 4], spec.IDS, "id")
    assert "the first 2 agree, then missing 4" in c.message
    v1, v2 = exact.encode({0: b"a", 1: b"b"}, spec.VOCAB), exact.encode({0: b"a", 1: b"c"}, spec.VOCAB)
    assert "vocab id 1: got b'c', expected b'b'" in exact.compare_answers(v2, v1, spec.VOCAB, "vocab id").message
    # fingerprints: equal exactly when the answers are, in the expected answer's shape
    assert torch.equal(exact.fingerprint(v1, v1, spec.VOCAB), exact.fingerprint(v1, v1, spec.VOCAB))
    assert not torch.equal(exact.fingerprint(v2, v1, spec.VOCAB), exact.fingerprint(v1, v1, spec.VOCAB))
    assert exact.fingerprint([1, 2, 3, 9], [1, 2, 3], spec.IDS).shape == (5,)


def test_the_specials_first_layout_is_renumbered() -> None:
    vocab, _ = ref.train_bpe(spec.CS336_TEXT, 263, ["<|endoftext|>"])
    first = {0: b"<|endoftext|>", **{i + 1: vocab[i] for i in range(262)}}
    norm = spec._layout_normaliser(("<|endoftext|>",))
    assert norm(exact.encode(first, spec.VOCAB)) == exact.encode(vocab, spec.VOCAB)
    assert norm(exact.encode(vocab, spec.VOCAB)) == exact.encode(vocab, spec.VOCAB)


class _Host:
    """What exact._timed needs of the child: a way to run the grader's own code (nothing is trapped here)."""

    @staticmethod
    def trusted():
        import contextlib

        return contextlib.nullcontext()


_SPIN = """
import time
def work(scale):
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.02 * scale:
        pass
    return 0
"""


@pytest.mark.parametrize(("scale", "ref_runs", "stopped"), [
    (1.0, 1, False),   # well under factor / CLEAR: one run of each decides
    (3.5, 3, False),   # between factor / CLEAR and factor: the full medians
    (7.0, 3, False),   # over the factor: the full medians say so
    (20.0, 1, True),   # past `stop`: stopped in its first run
])
def test_the_speed_audit_decides_early_only_far_from_the_limit(scale: float, ref_runs: int, stopped: bool) -> None:
    import types

    learner = types.ModuleType("learner")
    exec(compile(_SPIN, "<learner>", "exec"), learner.__dict__)
    steps = [{"call": "work", "args": [{"v": scale, "s": "float"}]}]
    timing = {"reference": _SPIN.replace("0.02 * scale", "0.02"), "runs": 3, "factor": 5.0, "stop": 10.0}
    got = exact._timed(learner, {"steps": steps, "timing": timing}, _Host())
    assert len(got["reference_s"]) == ref_runs and got["stopped"] is stopped, got
    if not stopped and scale > 2:
        ratio = sorted(got["learner_s"])[len(got["learner_s"]) // 2] / sorted(got["reference_s"])[1]
        assert (ratio > 5.0) is (scale > 5), got


@pytest.mark.slow
def test_a_full_recount_is_stopped_and_named(tmp_path: Path) -> None:
    r = check_file(SOLUTIONS / "bug_bpe_slow_recount__brute_force.py", exercise="bpe", seed=3,
                   limits=Limits(timeout_s=120, cpu_s=120))
    assert r.status == "fail" and r.diagnosis.id == "bpe_slow_recount"
    speed = [t for t in r.tests if t.name.startswith("speed: train_bpe")]
    assert len(speed) == 1 and speed[0].status == "fail", [t.name for t in r.tests]
    said = speed[0].message
    assert "stopped after" in said or "x allowed" in said, said
    assert all(t.status == "pass" for t in r.tests if not t.name.startswith("speed:"))


def test_regex_is_allowed_for_bpe_only_and_the_tokenizer_libraries_never() -> None:
    from drill.judge.policy import check_source

    ok = "import re\nimport regex\nP = regex.compile(r'\\p{L}+')\nS = re.compile('a|b')\n"
    assert check_source(ok, extra=("regex",)) == []
    assert check_source(ok)  # another exercise: refused
    for lib in ("tiktoken", "tokenizers", "sentencepiece", "transformers"):
        found = check_source(f"import {lib}\n", extra=("regex",))
        assert found and found[0].line == 1, lib
    assert check_source("import torch\nf = torch.compile\n", extra=("regex",))  # compile stays refused on torch


def test_a_wrong_python_type_is_named_in_the_contracts_terms(tmp_path: Path) -> None:
    source = (SOLUTIONS / "good_incremental_dict.py").read_text()
    as_text = "    return vocab, [(a.decode('latin-1'), b) for a, b in merges]"
    source = source.replace("    return vocab, merges", as_text)
    path = tmp_path / "bpe.py"
    path.write_text(source)
    r = check_file(path, seed=2)
    assert r.status == "fail" and r.diagnosis.id == "wrong_type"
    assert "train_bpe[1][0][0] is str" in r.diagnosis_detail and "torch.Tensor" not in r.diagnosis.fix


def _slow_encode_file(tmp_path: Path) -> Path:
    """good_plain_loop with encode scanning the merges list, rank by rank, for a pair of the pre-token: right
    answers, O(merges x length) per merge."""
    src = (SOLUTIONS / "good_plain_loop.py").read_text()
    fast = """                    ranked = [(self.ranks[(w[i], w[i + 1])], i) for i in range(len(w) - 1)
                              if (w[i], w[i + 1]) in self.ranks]
"""
    slow = """                    ranked = []
                    for r, pair in enumerate(self.merge_list):
                        ranked = [(r, i) for i in range(len(w) - 1) if (w[i], w[i + 1]) == pair][:1]
                        if ranked:
                            break
"""
    assert fast in src and "        self.ranks = {}\n" in src
    path = tmp_path / "bpe.py"
    keep = "        self.ranks = {}\n"
    path.write_text(src.replace(fast, slow).replace(keep, keep + "        self.merge_list = list(merges)\n"))
    return path


@pytest.mark.slow
def test_a_slow_encode_is_reported_and_fails_only_under_strict(tmp_path: Path, fork_server) -> None:
    slow = _slow_encode_file(tmp_path)
    limits = Limits(timeout_s=120, cpu_s=120)
    r = check_file(slow, exercise="bpe", seed=2, limits=limits, pool=fork_server)
    assert r.status == "pass", (r.status, r.diagnosis_detail)
    assert len(r.advisories) == 1 and r.advisories[0].startswith("bpe_encode_slow: encode on 200 KB"), r.advisories
    assert "pair -> rank" in r.advisories[0]
    strict = check_file(slow, exercise="bpe", seed=2, limits=limits, pool=fork_server, strict=True)
    assert strict.status == "fail" and "--strict" in strict.diagnosis_detail
    plain = check_file(SOLUTIONS / "good_plain_loop.py", exercise="bpe", seed=2, limits=limits, pool=fork_server,
                       strict=True)
    assert plain.status == "pass" and plain.advisories == [], plain.advisories
