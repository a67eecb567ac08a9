"""The `--json` document of drill check: one field list (drill/judge/schema.py) for to_json, --help and the README."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from drill.cli import app
from drill.judge import schema
from drill.judge.boundary import Unreadable, read_status, safe_text
from drill.judge.check import Result, TestResult

README = Path(__file__).resolve().parents[1] / "drill" / "judge" / "README.md"


def test_to_json_has_exactly_the_schema_fields() -> None:
    r = Result(exercise="rmsnorm", file="rmsnorm.py", status="pass", seed=1, tests=[TestResult("t", "pass")])
    doc = r.to_json()
    assert tuple(doc) == schema.TOP_FIELDS and doc["version"] == schema.VERSION
    assert tuple(doc["tests"][0]) == schema.TEST_FIELDS
    assert tuple(doc["layers"]) == schema.LAYER_FIELDS


def test_help_and_readme_list_the_same_fields(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    out = " ".join(CliRunner().invoke(app, ["check", "--help"]).output.replace("│", " ").split())
    for field in schema.TOP_FIELDS + schema.TEST_FIELDS + schema.LAYER_FIELDS:
        assert re.search(rf"\b{field}\b", out), field
    block = README.read_text().split("```json", 1)[1].split("```", 1)[0]
    keys = set(re.findall(r'"([a-z_]+)":', block))
    assert set(schema.TOP_FIELDS) <= keys and set(schema.LAYER_FIELDS) <= keys


def test_a_200000_deep_record_is_refused_without_recursion(tmp_path: Path) -> None:
    status = tmp_path / "status.jsonl"
    status.write_text(json.dumps({"event": "load"}) + "\n" + "[" * 200000 + "]" * 200000 + "\n")
    try:
        read_status(status)
    except Unreadable as exc:
        assert "nested too deeply" in str(exc) or "too long" in str(exc)
    else:
        raise AssertionError("a deep record was accepted")


def test_forged_records_are_refused(tmp_path: Path) -> None:
    status = tmp_path / "status.jsonl"
    for bad in ({"event": "end", "case": "0", "status": "ok"}, {"event": "verdict", "status": "pass"},
                {"event": "end", "case": 0, "status": "ok", "extra": 1}, [1, 2]):
        status.write_text(json.dumps(bad) + "\n")
        try:
            read_status(status)
        except Unreadable:
            continue
        raise AssertionError(f"accepted {bad}")


def test_safe_text_escapes_terminal_control_and_caps_length() -> None:
    text = safe_text("\x1b[2J\x1b[H\x07ok\r" + "x" * 5000, 100)
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\\x1b[2J" in text
    assert len(text) == 100


def test_safe_text_escapes_invisible_and_line_breaking_characters() -> None:
    """Separators some terminals break lines at, bidi and zero-width marks, the BOM and the tag characters
    that can hide text are shown as escapes; ordinary non-ASCII text is kept."""
    text = safe_text("a\u2028b\u2029c\u202ed\u2066e\u200bf\ufeffg\U000e0041h é 中")
    assert text == "a\\u2028b\\u2029c\\u202ed\\u2066e\\u200bf\\ufeffg\\U000e0041h é 中"
