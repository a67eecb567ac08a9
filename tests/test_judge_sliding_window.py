"""sliding_window grading: the reference is Hugging Face's sliding-window mask, every mistake is told apart.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
the reference agrees with transformers' `sliding_window_causal_mask_function`
fed to torch's SDPA, and the reference cache with the uncached rows on every
split; each seed has the cases the contract names; every known mistake fails
a test on every seed and no two mistakes give the same outputs; the rolling
driver's size count (lists, tuples, dicts, deques, the file's own helper
objects, one storage once, integer bookkeeping left out) and the judge that
names `swa_cache_grows`; and, through the fork server, a cache that grows,
a wrong-shaped `attend`, a detached gradient and the forbidden ops.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import torch

from drill.judge import rolling
from drill.judge.check import _tolerance_of, check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import sliding_window as swa
from drill.reference.sliding_window import RollingKVCache, sliding_window_attention, window_mask

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "sliding_window"
SEEDS = (0, 1, 7, 20261129)
TOL = _tolerance_of(swa.SPEC)
LIMITS = Limits(timeout_s=120, cpu_s=120, memory_mb=2048)


def _prepared(seed: int) -> list:
    cases = swa.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = swa.reference(c)
    return cases


def _values(result):
    return result if not isinstance(result, tuple) else result[0]


def _care(result):
    return None if not isinstance(result, tuple) else ~result[1]


# ---------------------------------------------------------------- the reference


@pytest.mark.parametrize(("t_q", "t_k", "window"), [(5, 5, 3), (3, 11, 4), (1, 9, 2), (4, 7, 1), (4, 7, 7),
                                                    (6, 6, 20), (2, 12, 11)])
def test_the_mask_is_transformers_sliding_window_causal_mask(t_q: int, t_k: int, window: int) -> None:
    masking = pytest.importorskip("transformers.masking_utils")
    fn = masking.sliding_window_causal_mask_function(window)
    q_idx = torch.arange(t_k - t_q, t_k).view(-1, 1)  # bottom-right: absolute positions of the queries
    kv_idx = torch.arange(t_k).view(1, -1)
    hf = fn(0, 0, q_idx, kv_idx)
    assert torch.equal(torch.broadcast_to(hf, (t_q, t_k)), window_mask(t_q, t_k, window))
    assert int(window_mask(t_q, t_k, window)[-1].sum()) == min(window, t_k)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reference_is_sdpa_under_transformers_mask(seed: int) -> None:
    masking = pytest.importorskip("transformers.masking_utils")
    for case in swa.make_cases(seed):
        if case.kind != "call":
            continue
        a = case.args
        q, k, v = a["q"].double(), a["k"].double(), a["v"].double()
        t_q, t_k = q.shape[-2], k.shape[-2]
        mask = masking.sliding_window_causal_mask_function(a["window"])(
            0, 0, torch.arange(t_k - t_q, t_k).view(-1, 1), torch.arange(t_k).view(1, -1))
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        got = sliding_window_attention(a["q"].float(), a["k"].float(), a["v"].float(), a["window"])
        assert torch.allclose(got.double(), want, atol=1e-5), case.name


def test_window_one_returns_v_and_a_window_past_t_k_is_causal() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for n in (4, 9, 9))
    assert torch.allclose(sliding_window_attention(q, k, v, 1), v[..., -4:, :])
    causal = torch.ones(4, 9, dtype=torch.bool).tril(diagonal=5)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal)
    for window in (9, 10, 50):
        assert torch.allclose(sliding_window_attention(q, k, v, window), want, atol=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reference_cache_gives_the_uncached_rows_and_stays_within_the_window(seed: int) -> None:
    for case in _prepared(seed):
        if case.kind != swa.KIND:
            continue
        got = swa.drive(RollingKVCache, case)
        if case.extra["returns"] == "out":
            assert compare(got, case.expected, TOL(case), dtype=case.out_dtype).ok, case.name
        else:
            assert case.judge(got).ok, case.name
            w = case.extra["window"]
            assert int(got.max()) == case.ctx["limit"] * (w - 1) // w  # it keeps window - 1 positions


# ---------------------------------------------------------------- the cases


@pytest.mark.parametrize("seed", SEEDS)
def test_the_cases_the_contract_names_are_there(seed: int) -> None:
    cases = swa.make_cases(seed)
    fn = [c for c in cases if c.kind == "call" and c.repeat is None]
    shapes = [(c.args["q"].shape[-2], c.args["k"].shape[-2], c.args["window"]) for c in fn]
    assert any(tq < tk and 1 < w < tk for tq, tk, w in shapes)  # bottom-right with a real window
    assert any(tq == tk and 1 < w < tk for tq, tk, w in shapes)
    assert any(tq == 1 for tq, _, _ in shapes)
    assert any(w == 1 for _, _, w in shapes)
    assert any(w >= tk and tq < tk for tq, tk, w in shapes) and any(w >= tk and tq == tk for tq, tk, w in shapes)
    assert any(w == tk - 1 for _, tk, w in shapes)
    assert {c.ctx["dtype"] for c in fn} == {"float32", "float16", "bfloat16"}
    graded = [c for c in fn if c.wants_grads]
    assert len(graded) >= 4 and all(c.grad_inputs == ("q", "k", "v") and c.ctx["dtype"] == "float32" for c in graded)
    assert any(c.args["q"].shape[0] > 1 and c.args["q"].shape[1] > 1 for c in fn)
    rolls = [c for c in cases if c.kind == swa.KIND]
    splits = [(c.extra["calls"], c.extra["window"]) for c in rolls if c.extra["returns"] == "out"]
    assert any(len(calls) == 1 and calls[0] > w for calls, w in splits)  # one call
    assert any(set(calls) == {1} and len(calls) > 2 * w for calls, w in splits)  # one token at a time
    assert any(min(calls) > w for calls, w in splits)  # every chunk longer than the window
    assert any(1 in calls and max(calls) > w for calls, w in splits)  # mixed
    assert any(w == 1 for _, w in splits) and any(w > sum(calls) for calls, w in splits)
    assert {c.ctx["dtype"] for c in rolls if c.extra["returns"] == "out"} == {"float32", "float16", "bfloat16"}
    held = [c for c in rolls if c.extra["returns"] == "held"]
    assert len(held) >= 5 and all(c.judge is not None for c in held)
    assert all(sum(c.extra["calls"]) > c.extra["window"] for c in held)  # each has something to evict
    assert not any(c.wants_grads for c in rolls)  # the cache's gradients are not graded


# ---------------------------------------------------------------- the mistakes


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_shows_and_no_two_give_the_same_outputs(seed: int) -> None:
    cases = [c for c in _prepared(seed) if c.judge is None]
    outs = {}
    for bug in swa.SPEC.bugs:
        got = [bug.fn(c) for c in cases]
        failing = [c.name for c, g in zip(cases, got, strict=True)
                   if g is not None and not compare(_values(g).to(c.out_dtype), c.expected, TOL(c), care=_care(g),
                                                    dtype=c.out_dtype).ok]
        assert failing, bug.label
        outs[bug.label] = got
    ids = {b.label: b.diagnosis.id for b in swa.SPEC.bugs}
    for a in outs:
        for b in outs:
            if ids[a] < ids[b]:
                same = True
                for x, y, c in zip(outs[a], outs[b], cases, strict=True):
                    xv = c.expected if x is None else _values(x)
                    yv = c.expected if y is None else _values(y)
                    care = _care(x) if x is not None else _care(y)
                    if not compare(xv.to(c.out_dtype), yv.to(c.out_dtype), TOL(c), care=care,
                                   dtype=c.out_dtype).ok:
                        same = False
                        break
                assert not same, (a, b)


@pytest.mark.parametrize("seed", SEEDS)
def test_cache_mistakes_leave_the_function_right_and_one_token_at_a_time_too(seed: int) -> None:
    cases = _prepared(seed)
    for bug in swa.SPEC.bugs:
        if bug.diagnosis.id not in ("swa_evicts_before_attend", "swa_chunk_future"):
            continue
        for c in cases:
            if c.kind == "call":
                assert bug.fn(c) is None
            elif c.extra["returns"] == "out" and set(c.extra["calls"][1:]) <= {1} and c.extra["calls"][0] == 1:
                out = _values(bug.fn(c))
                assert compare(out.to(c.out_dtype), c.expected, TOL(c), dtype=c.out_dtype).ok, (bug.label, c.name)


# ---------------------------------------------------------------- the size count


class _Host:
    @staticmethod
    def plain(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone()


class _Helper:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


def test_the_count_walks_containers_and_the_files_own_objects() -> None:
    class Cache:
        pass

    c = Cache()
    c.a = torch.zeros(2, 3)  # 6
    c.b = [torch.zeros(4), (torch.zeros(5), {"x": torch.zeros(7)})]  # 16
    c.d = collections.deque([torch.zeros(3)])  # 3
    c.e = _Helper(torch.zeros(10))  # 10 when this module is the file's
    c.same = c.a  # the same tensor twice: once
    c.view = c.a[:, :1]  # a view of a's storage: counted as its largest view
    c.index = torch.arange(100)  # integer bookkeeping
    c.mask = torch.ones(50, dtype=torch.bool)
    assert rolling.held_elements(c, __name__) == 6 + 16 + 3 + 10
    assert rolling.held_elements(c, "some.other.module") == 6 + 16 + 3
    c.loop = c  # a cycle ends
    c.b.append(c.b)
    assert rolling.held_elements(c, __name__) == 6 + 16 + 3 + 10


def test_the_judge_names_a_cache_that_grows_and_passes_one_at_the_bound() -> None:
    case = next(c for c in _prepared(3) if c.kind == swa.KIND and c.extra["returns"] == "held"
                and set(c.extra["calls"]) == {1})
    grows = swa.drive(swa.cache_class(keep="all"), case)
    verdict = case.judge(grows)
    assert not verdict.ok and verdict.diagnosis.id == "swa_cache_grows"
    assert f"= {case.ctx['limit']}" in verdict.message and "after call" in verdict.message
    assert case.judge(swa.drive(swa.cache_class(keep="window"), case)).ok  # exactly 2*B*H*window*d
    assert not case.judge(torch.tensor([1.0])).ok  # an unreadable measurement fails


def test_the_driver_says_what_attend_returned_wrong() -> None:
    case = next(c for c in swa.make_cases(0) if c.kind == swa.KIND and c.extra["returns"] == "out")

    class WholeRows(RollingKVCache):
        def attend(self, q, k, v):
            out = super().attend(q, k, v)
            return out[..., :1, :] if q.shape[-2] > 1 else out

    class Pair(RollingKVCache):
        def attend(self, q, k, v):
            return super().attend(q, k, v), None

    with pytest.raises(rolling.ContractError, match="wrong_shape|the new queries' rows") as e:
        swa.drive(WholeRows, case)
    assert e.value.status == "wrong_shape"
    with pytest.raises(rolling.ContractError) as e:
        swa.drive(Pair, case)
    assert e.value.status == "wrong_type" and "tuple" in str(e.value)


# ---------------------------------------------------------------- through the grader

GOOD = (SOLUTIONS / "good_masked_scores.py").read_text()


def _grade(tmp_path: Path, source: str, fork_server, seed: int = 3):
    path = tmp_path / "sliding_window.py"
    path.write_text(source)
    return check_file(path, exercise="sliding_window", seed=seed, limits=LIMITS, pool=fork_server)


def _failing(result) -> list[str]:
    return [t.name for t in result.tests if t.status != "pass"]


def test_a_growing_cache_fails_only_its_size_tests(tmp_path: Path, fork_server) -> None:
    source = GOOD.replace("k_all[..., -self.window:, :]", "k_all").replace("v_all[..., -self.window:, :]", "v_all")
    r = _grade(tmp_path, source, fork_server)
    assert r.status == "fail" and r.diagnosis.id == "swa_cache_grows"
    failing = _failing(r)
    assert failing and all(n.endswith("positions held") for n in failing)
    assert "2 * B * H * window * d" in r.diagnosis_detail


def test_a_cache_one_slot_short_passes_and_one_slot_over_fails(tmp_path: Path, fork_server) -> None:
    short = GOOD.replace("-self.window:", "k_all.shape[-2] - min(self.window - 1, k_all.shape[-2]):")
    assert _grade(tmp_path, short, fork_server).status == "pass"
    over = GOOD.replace("-self.window:", "-(self.window + 1):")
    r = _grade(tmp_path, over, fork_server)
    assert r.status == "fail" and r.diagnosis.id == "swa_cache_grows"


def test_a_detached_key_fails_the_gradient_tests(tmp_path: Path, fork_server) -> None:
    source = GOOD.replace("scores = (q.float() @ k.float()", "scores = (q.float() @ k.detach().float()")
    r = _grade(tmp_path, source, fork_server)
    assert r.status == "fail"
    failing = [t for t in r.tests if t.status != "pass"]
    assert failing and all(t.name.startswith("fp32") and "cache" not in t.name for t in failing)


@pytest.mark.parametrize(("call", "needle"), [
    ("torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)", "scaled_dot_product"),
    ("_flex.flex_attention(q, k, v)", "flex_attention"),
])
def test_the_fused_attentions_are_forbidden(tmp_path: Path, fork_server, call: str, needle: str) -> None:
    source = GOOD.replace("import torch\n", "import torch\nfrom torch.nn.attention import flex_attention as _flex\n", 1)
    source = source.replace('    scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])\n',
                            f"    return {call}\n", 1)
    r = _grade(tmp_path, source, fork_server)
    assert r.status == "fail" and r.diagnosis.id == "forbidden_op", r.diagnosis_detail
    assert needle in r.diagnosis_detail


# ---------------------------------------------------------------- --in-model


def test_the_childs_windowed_decoder_with_the_reference_parts_is_the_parents() -> None:
    """decoder.py's sliding_window slot, filled with the reference function and cache, gives the parent's answers."""
    import types

    from drill.judge import decoder, inmodel
    from drill.reference import sliding_window as reference

    logits_case, tokens_case = inmodel.cases_for("sliding_window", 5)
    assert logits_case.extra["config"]["sliding_window"] == inmodel.WINDOW < logits_case.args["ids"].shape[1]
    ns: dict = {}
    exec(compile(decoder.source_for("sliding_window"), "<decoder>", "exec"), ns)
    model = ns["Decoder"](logits_case.extra["config"], "sliding_window")
    model.load_state_dict({k[len("decoder."):]: v for k, v in logits_case.params.items()})
    model.swap("sliding_window", types.SimpleNamespace(sliding_window_attention=reference.sliding_window_attention,
                                                       RollingKVCache=reference.RollingKVCache))
    ids = logits_case.args["ids"]
    with torch.no_grad():
        assert torch.allclose(model(ids), logits_case.expected, atol=1e-5, rtol=1e-4)
    assert torch.equal(ns["greedy"](model, ids, inmodel.NEW_TOKENS, cached=True), tokens_case.expected)
    causal = inmodel.build_decoder("rmsnorm", inmodel.CONFIG).eval()  # the window changes the answer
    causal.load_state_dict({k[len("decoder."):]: v for k, v in logits_case.params.items()})
    assert not torch.allclose(causal(ids), logits_case.expected, atol=1e-3)


def test_in_model_a_good_file_passes_and_an_early_eviction_fails_only_the_generation(fork_server) -> None:
    good = check_file(SOLUTIONS / "good_masked_scores.py", "sliding_window", 6, LIMITS, pool=fork_server,
                      in_model=True)
    assert good.status == "pass" and sum(t.name.startswith("in-model") for t in good.tests) == 2
    bug = check_file(SOLUTIONS / "bug_swa_evicts_before_attend__trim_then_attend.py", "sliding_window", 6, LIMITS,
                     pool=fork_server, in_model=True)
    in_model = {t.name.split(":")[1].split(" of ")[0].strip(): t.status for t in bug.tests
                if t.name.startswith("in-model")}
    assert in_model == {"logits": "pass", "greedy generation": "fail"}  # a full forward has no cache
    assert bug.diagnosis.id == "swa_evicts_before_attend"
