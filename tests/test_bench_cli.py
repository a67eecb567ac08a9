"""drill bench end to end, through the CLI: table rows, growth exponents, --json, refusals, bad input.

Every benchmark here runs the real isolated child on CPU at small sizes
(--max-size), so the whole file stays well under a minute on a quiet machine.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app

pytestmark = pytest.mark.slow  # every test times real ladders (the inner loop has tests/test_bench_parts.py)

ROOT = Path(__file__).parent
SOL = ROOT / "fixtures" / "solutions"
GOOD_ATTENTION = SOL / "attention" / "good_matmul_softmax.py"
GOOD_KV = SOL / "kv_cache" / "good_concat_bottom_right.py"
QUADRATIC_KV = ROOT / "fixtures" / "bench" / "kv_cache_quadratic.py"

runner = CliRunner()


def bench(*args: str):
    return runner.invoke(app, ["bench", *args])


@pytest.fixture(scope="module")
def kv_runs(tmp_path_factory) -> dict[str, dict]:
    """The same small cache-length ladder for a real KV cache and a quadratic-recompute one (--json)."""
    docs = {}
    for name, path in (("good", GOOD_KV), ("quadratic", QUADRATIC_KV)):
        res = bench(str(path), "--exercise", "kv_cache", "--max-size", "1024", "--json", "--seed", "3")
        assert res.exit_code == 0, res.output
        docs[name] = json.loads(res.stdout)
    return docs


def test_table_has_a_row_per_size_and_implementation() -> None:
    res = bench(str(GOOD_ATTENTION), "--exercise", "attention", "--max-size", "512")
    assert res.exit_code == 0, res.output
    out = res.stdout
    sizes = [int(m) for m in re.findall(r"^│\s+(\d+) │ yours", out, flags=re.M)]
    assert sizes == [128, 256, 512]
    assert len(re.findall(r"│ fused ref", out)) == 3 and len(re.findall(r"│ math ref", out)) == 3
    assert re.search(r"fused ref\s.*1\.00x", out)  # the ratio column is relative to the fused reference
    assert re.search(r"yours\s+~T\^\d\.\d\d\s+~T\^\d\.\d\d", out)  # fitted time and memory exponents
    assert "log scale" in out and "█" in out  # the plot
    assert "passed drill check" in out


def test_json_shape(kv_runs) -> None:
    doc = kv_runs["good"]
    for key in ("exercise", "file", "device", "dtype", "threads", "torch", "seed", "size_name", "size_label", "dims",
                "sizes", "exponents", "memory_exponents", "expected_exponent", "warnings", "stopped", "learner_error"):
        assert key in doc, key
    assert doc["exercise"] == "kv_cache" and doc["device"] == "cpu" and doc["dtype"] == "float32"
    assert doc["threads"] == 1 and doc["peak_bandwidth_gb_s"] is None and doc["learner_error"] is None
    assert [s["size"] for s in doc["sizes"]] == [256, 512, 1024]
    for s in doc["sizes"]:
        assert set(s["results"]) == {"learner", "fused", "math"}
        for impl, r in s["results"].items():
            assert r["status"] == "ok", (impl, r)
            assert r["reps"] >= 3 and r["min_s"] <= r["q1_s"] <= r["median_s"] <= r["q3_s"] <= r["max_s"]
            assert r["tokens_per_s"] == pytest.approx(1 / r["median_s"])  # one token per decode step, B=1
            assert r["peak_bytes"] > 0
        assert s["results"]["fused"]["ratio_to_fused"] == pytest.approx(1.0)
    assert all(isinstance(doc["exponents"][i], float) for i in ("learner", "fused", "math"))


def _fastest_run_exponent(doc: dict) -> float:
    """The learner's growth exponent fitted to each size's fastest run (least squares in log-log).

    The product fits medians; a load spike on this shared machine lifts a median (it once read 1.36 for
    the quadratic file, which is ~1.9 on a quiet machine) far more than it lifts the fastest of the runs."""
    xs = [math.log(s["size"]) for s in doc["sizes"]]
    ys = [math.log(s["results"]["learner"]["min_s"]) for s in doc["sizes"]]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def test_quadratic_recompute_grows_clearly_faster_than_a_real_cache(kv_runs) -> None:
    good = _fastest_run_exponent(kv_runs["good"])
    quad = _fastest_run_exponent(kv_runs["quadratic"])
    assert quad > 1.4, quad  # O(T^2) work per decode step
    assert quad > good + 0.8, (quad, good)
    assert any("grows as" in w for w in kv_runs["quadratic"]["warnings"])
    assert not any("your time grows" in w for w in kv_runs["good"]["warnings"])


def test_refuses_a_file_that_fails_check() -> None:
    bad = SOL / "attention" / "bug_missing_scale__matmul.py"
    res = bench(str(bad), "--exercise", "attention")
    assert res.exit_code == 1
    assert "does not pass drill check" in res.stderr
    assert "scal" in res.stderr.lower()  # the diagnosis names the mistake
    assert "│ yours" not in res.stdout  # nothing was benchmarked


def test_the_refusal_suggests_a_check_command_that_grades_the_same_tests(tmp_path: Path) -> None:
    """A file whose name does not say the exercise: the suggested `drill check` carries -e and the
    check's seed, and run as printed it grades the same hidden tests with the same verdict."""
    bad = tmp_path / "bugs" / "att_noscale.py"
    bad.parent.mkdir()
    shutil.copy(SOL / "attention" / "bug_missing_scale__matmul.py", bad)
    res = bench(str(bad), "--exercise", "attention", "--json")
    assert res.exit_code == 1, res.output
    refusal = json.loads(res.stdout)
    command = refusal["check_command"]
    assert f"Run `{command}` for the full report." in res.stderr
    argv = shlex.split(command)
    assert argv[:3] == ["drill", "check", str(bad)] and argv[3:5] == ["-e", "attention"]
    assert argv[5:] == ["--seed", str(refusal["check"]["seed"])]
    assert runner.invoke(app, ["check", str(bad)]).exit_code == 2  # without -e: "cannot tell the exercise"
    checked = runner.invoke(app, [*argv[1:], "--json"])
    assert checked.exit_code == 1, checked.output
    doc = json.loads(checked.stdout)
    before = refusal["check"]
    assert (doc["tests_passed"], doc["tests_total"]) == (before["tests_passed"], before["tests_total"])
    assert [(t["name"], t["status"]) for t in doc["tests"]] == [(t["name"], t["status"]) for t in before["tests"]]
    assert doc["diagnosis"]["id"] == before["diagnosis"]["id"] == "missing_scale"


def test_the_suggested_check_names_the_exercise_only_when_the_file_name_does_not() -> None:
    from types import SimpleNamespace

    from drill.bench.commands import check_command

    named = SimpleNamespace(file="work/attention.py", exercise="attention", seed=12)
    assert check_command(named) == "drill check work/attention.py --seed 12"
    spaced = SimpleNamespace(file="my bugs/v2.py", exercise="rope", seed=3)
    assert shlex.split(check_command(spaced)) == ["drill", "check", "my bugs/v2.py", "-e", "rope", "--seed", "3"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["no_such_file.py", "--exercise", "attention"], "no such file"),
        ([str(GOOD_ATTENTION), "--exercise", "flash"], "unknown graded exercise 'flash'"),
        ([str(GOOD_ATTENTION), "--exercise", "attention", "--device", "tpu"], "unknown device 'tpu'"),
        ([str(GOOD_ATTENTION), "--exercise", "attention", "--dtype", "int8"], "unknown dtype 'int8'"),
        ([str(GOOD_ATTENTION), "--exercise", "attention", "--max-size", "5"], "below the smallest size"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    res = bench(*args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr


def test_cuda_requested_without_a_gpu_is_a_usage_error() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    res = bench(str(GOOD_ATTENTION), "--exercise", "attention", "--device", "cuda")
    assert res.exit_code == 2
    assert "no CUDA device" in res.stderr


def test_forbidden_op_used_only_at_large_sizes_is_caught() -> None:
    res = bench(str(ROOT / "fixtures" / "bench" / "attention_fused_when_long.py"), "--exercise", "attention",
                "--max-size", "512", "--json")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert [s["size"] for s in doc["sizes"]] == [128, 256]  # the ladder ends where the cheat starts
    assert doc["sizes"][0]["results"]["learner"]["status"] == "ok"
    bad = doc["sizes"][1]["results"]["learner"]
    assert bad["status"] == "forbidden_op" and bad["median_s"] is None
    assert "scaled_dot_product_attention is forbidden" in doc["learner_error"]
    assert "line 12" in doc["learner_error"] and "T=256" in doc["learner_error"]


def test_a_two_size_ladder_says_why_there_is_no_exponent() -> None:
    res = bench(str(GOOD_ATTENTION), "--exercise", "attention", "--max-size", "256")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "growth (least squares on log time vs log T)" in out.splitlines()  # one line, not wrapped
    text = " ".join(out.split())
    assert "needs at least 3 sizes; this run measured 2: --max-size stopped the ladder; raise --max-size" in text
    assert "ladder stopped at --max-size 256 (the ladder goes on to T=2048)" in " ".join(out.split())


def test_json_fields_match_the_schema_help_and_readme(kv_runs) -> None:
    """One list of fields (drill.bench.schema): the real document, --help and the README all follow it."""
    from drill.bench import schema

    doc = kv_runs["good"]
    assert tuple(doc) == schema.TOP_FIELDS
    for s in doc["sizes"]:
        assert tuple(s) == schema.SIZE_FIELDS
        for r in s["results"].values():
            assert tuple(r) == schema.RESULT_FIELDS
    help_text = " ".join(runner.invoke(app, ["bench", "--help"], env={"COLUMNS": "200"}).stdout.split())
    readme = (Path(__file__).parents[1] / "drill" / "bench" / "README.md").read_text(encoding="utf-8")
    block = readme.split("## `--json`", 1)[1].split("```", 2)[1]
    for name in (*schema.TOP_FIELDS, *schema.SIZE_FIELDS, *schema.RESULT_FIELDS):
        assert re.search(rf"\b{name}\b", help_text), f"--help does not list {name}"
        assert re.search(rf"\b{name}\b", block), f"README's --json block does not list {name}"
    assert "a size predicted past --timeout" in help_text


def test_a_short_timeout_stops_the_ladder_cleanly_before_a_size_that_would_not_fit() -> None:
    """--timeout 2: the small sizes run; the size that would not fit is skipped (exit 0), never killed."""
    res = bench(str(GOOD_ATTENTION), "--exercise", "attention", "--timeout", "2", "--json", "--seed", "4")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["cut_short"] is False and doc["stop_reason"] == "timeout", doc["stopped"]
    assert 1 <= len(doc["sizes"]) < 5  # how many fit depends on the machine; that none is killed does not
    nxt = 2 * doc["sizes"][-1]["size"]
    assert re.fullmatch(rf"stopped before T={nxt}: predicted ~[\d.]+ s, (more than|too close to) "
                        r"the [\d.]+ s left of --timeout 2 s",
                        doc["stopped"]), doc["stopped"]


def test_help_says_what_size_varies_for_every_bench_exercise() -> None:
    """The size sentence of `drill bench --help` is prose: every exercise with a workload must be in it."""
    from drill.bench.commands import BENCH_HELP
    from drill.bench.workloads import WORKLOADS

    sizes = " ".join(BENCH_HELP[BENCH_HELP.index("Sizes:"):BENCH_HELP.index("The ladder")].split())
    missing = [name for name in WORKLOADS if not re.search(rf"\b{name}\b", sizes)]
    assert not missing, f"drill bench --help names no size for {missing}: {sizes}"
    res = bench("--help")
    assert res.exit_code == 0 and "flash_attention" in res.output
