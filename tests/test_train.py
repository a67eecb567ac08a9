"""`drill train`: the learner's parts in a tiny training run beside the reference's (drill/judge/train.py).

Through the CLI (CliRunner, `--size tiny` so a run takes seconds) and the Python API where a fork server is
passed in (the runs that grade files). The planted broken part is an AdamW the check cannot see wrong
(tests/fixtures/train/adamw_late_lr.py: right for the check's five steps, ten times the rate from step 7):
it passes its check, is used, and the run must name it. A NaN optimizer and a part that raises are bad
input the run must word with the step and the parameter or part.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.errors import UserError

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"
PLANTED = Path(__file__).parent / "fixtures" / "train"
# One correct file per part, in styles other than the index's fixture where there are several.
GOOD = {"bpe": "good_incremental_dict.py", "adamw": "good_lerp_addcdiv.py", "lr_schedule": "good_three_pieces.py",
        "grad_clip": "good_flat_cat.py", "decoder_block": "good_hf_llama.py",
        "cross_entropy": "good_einsum_one_hot.py", "sampling": "good_rank_mask.py"}

pytestmark = pytest.mark.xdist_group("train")


def folder(tmp_path: Path, **files: Path | str) -> Path:
    """tmp_path/ws with `<part>.py` for each keyword: a Path copied, or a GOOD entry's name."""
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    for part, src in files.items():
        path = src if isinstance(src, Path) else SOLUTIONS / part / src
        shutil.copyfile(path, ws / f"{part}.py")
    return ws


def drill_train(*args: str, columns: int = 80):
    return CliRunner().invoke(app, ["train", *args], env={"COLUMNS": str(columns)})


def test_every_part_mine_stays_in_band_and_is_drawn(tmp_path: Path) -> None:
    ws = folder(tmp_path, **GOOD)
    r = drill_train(str(ws), "--size", "tiny", "--no-check", "--chart", "--seed", "5")
    assert r.exit_code == 0, r.output
    assert "in band: your loss stayed within 1% of the reference's at every one of the 24 steps" in r.output
    assert "your parts in this run: bpe, adamw, lr_schedule, grad_clip, decoder_block, cross_entropy, sampling" \
        in r.output
    assert "* yours  o reference  # overlap" in r.output  # the chart, not the table
    assert "sampled after 'The KV cache stores': yours" in r.output
    assert all(len(line) <= 80 for line in r.output.splitlines() if "|" in line)


def test_a_bpe_numbering_specials_first_meets_the_same_embedding_rows(tmp_path: Path) -> None:
    """The contract leaves the ids' numbering free: a BPE that numbers the special token first gives the same
    tokens under other ids, renumbered by their bytes, so the run stays in band and says nothing differs."""
    ws = folder(tmp_path, bpe="good_specials_first_regex_split.py")
    r = drill_train(str(ws), "--size", "tiny", "--no-check", "--no-chart", "--seed", "5")
    assert r.exit_code == 0, r.output
    assert "in band" in r.output and "tokenized the text differently" not in r.output


def test_planted_adamw_is_named(tmp_path: Path) -> None:
    ws = folder(tmp_path, adamw=PLANTED / "adamw_late_lr.py", lr_schedule=GOOD["lr_schedule"])
    r = drill_train(str(ws), "--size", "tiny", "--no-check", "--no-chart", "--seed", "5")
    assert r.exit_code == 1, r.output
    assert "out of band from step 8:" in r.output  # the loss after the 7th update, the first at 10x
    assert "the part that made it diverge: your adamw" in r.output
    assert "step  reference" in r.output  # --no-chart: the table


def test_nan_optimizer_names_step_and_parameter(tmp_path: Path) -> None:
    ws = folder(tmp_path, adamw=PLANTED / "adamw_nan_step3.py")
    r = drill_train(str(ws), "--size", "tiny", "--no-check", "--seed", "5")
    assert r.exit_code == 1, r.output
    assert "step 3: model.embed_tokens.weight became NaN or infinite after the optimizer's step" in r.output
    assert "your adamw" in r.output


def test_a_part_that_raises_is_named_with_its_step(tmp_path: Path) -> None:
    src = tmp_path / "ce.py"
    src.write_text("def cross_entropy(logits, targets, ignore_index=-100, label_smoothing=0.0):\n"
                   "    raise ValueError('no loss today')\n", encoding="utf-8")
    ws = folder(tmp_path, cross_entropy=src)
    r = drill_train(str(ws), "--size", "tiny", "--no-check", "--seed", "5")
    assert r.exit_code == 1, r.output
    assert "your run stopped" in r.output
    assert "your cross_entropy raised ValueError at step 0 (cross_entropy.py:2): no loss today" in r.output


def test_no_check_still_applies_the_static_policy(tmp_path: Path) -> None:
    src = tmp_path / "lr.py"
    src.write_text("def cosine_lr(it, max_lr, min_lr, warmup_iters, cosine_cycle_iters):\n"
                   "    return float(len(open('/etc/hostname').read()))\n", encoding="utf-8")
    ws = folder(tmp_path, lr_schedule=src, grad_clip=GOOD["grad_clip"])
    r = drill_train(str(ws), "--size", "tiny", "--no-check", "--no-chart", "--seed", "5")
    assert r.exit_code == 0, r.output
    assert "refused (policy_violation" in r.output and "your parts in this run: grad_clip" in r.output


def test_empty_folder_says_what_to_write_first(tmp_path: Path) -> None:
    ws = tmp_path / "empty"
    ws.mkdir()
    r = drill_train(str(ws))
    assert r.exit_code == 2
    assert "no part of yours is in the folder: write lr_schedule.py first" in r.output


def test_not_a_folder(tmp_path: Path) -> None:
    r = drill_train(str(tmp_path / "missing"))
    assert r.exit_code == 2 and "not a folder" in r.output


def test_unknown_size(tmp_path: Path) -> None:
    r = drill_train(str(folder(tmp_path, **GOOD)), "--size", "huge", "--no-check")
    assert r.exit_code == 2 and "unknown --size 'huge'" in r.output


def test_no_passing_part_says_which_to_fix(tmp_path: Path, fork_server) -> None:
    from drill.judge.train import run_train

    ws = folder(tmp_path, lr_schedule="bug_lr_no_floor__two_pieces.py")
    with pytest.raises(UserError, match="none of your parts passes its check yet: write lr_schedule.py first"):
        run_train(ws, size="tiny", seed=5, pool=fork_server)


def test_the_four_starters_say_which_to_write_first(tmp_path: Path, fork_server) -> None:
    """A fresh install's `drill start` of bpe, adamw, lr_schedule and grad_clip, then `drill train`: every
    starter fails its check (NotImplementedError), so the run names the first one to write."""
    from drill.judge.exercise_files import start_exercise
    from drill.judge.train import run_train

    ws = tmp_path / "ws"
    for name in ("bpe", "adamw", "lr_schedule", "grad_clip"):
        start_exercise(name, ws)
    assert sorted(p.name for p in ws.glob("*.py")) == ["adamw.py", "bpe.py", "grad_clip.py", "lr_schedule.py"]
    with pytest.raises(UserError, match="none of your parts passes its check yet: write lr_schedule.py first"):
        run_train(ws, size="tiny", seed=5, pool=fork_server)


def test_graded_then_used_and_planted_adamw_passes_its_check(tmp_path: Path, fork_server) -> None:
    """Grade-then-use: the planted AdamW passes its check (the bug is past its five steps) and is used; a
    failing cross_entropy is not, and the reference's stands in; the verdict names adamw."""
    from drill.judge.train import run_train

    ws = folder(tmp_path, adamw=PLANTED / "adamw_late_lr.py", cross_entropy="bug_ce_sum_not_mean__masked_sum.py")
    report = run_train(ws, size="tiny", seed=5, pool=fork_server)
    used = {p.name: p for p in report.parts}
    assert used["adamw"].mine and used["adamw"].why.startswith("passed its check")
    assert not used["cross_entropy"].mine and "failed its check" in used["cross_entropy"].why
    assert "Diagnosis(" not in used["cross_entropy"].why and "sum" in used["cross_entropy"].why.lower()
    assert not used["bpe"].mine and used["bpe"].why == "no file"
    assert report.first_out == 7 and report.culprits == ["adamw"]
    assert not report.passed


@pytest.mark.slow
def test_default_run_of_correct_parts_is_in_band(tmp_path: Path) -> None:
    ws = folder(tmp_path, **GOOD)
    r = drill_train(str(ws), "--seed", "11", "--no-chart")
    assert r.exit_code == 0, r.output
    assert "in band: your loss stayed within 1% of the reference's at every one of the 300 steps" in r.output
    assert "passed its check" in r.output
