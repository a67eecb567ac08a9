"""`drill check --junit report.xml`: the Results of a run as the JUnit XML that CI systems read.

Why JUnit: GitHub Actions' test reporters, GitLab (`artifacts:reports:junit`), Jenkins and GitHub Classroom
all read it, so a course grades a folder of submissions on the runners it already has (docs/ci.md).

Shape (validated against the Jenkins xUnit plugin's junit-10.xsd in tests/test_judge_editors.py):
`<testsuites>` > one `<testsuite name=FILE>` per graded file (tests / failures / errors / skipped / time,
and the seed, exercise and status as properties) > one `<testcase classname=EXERCISE name=TEST>` per hidden
test. A failing test carries `<failure message="<title> [id]">` (an erroring one `<error>`) with the test's
own message, the diagnosis's why, fix and detail and the error sizes in its body; a test that never ran is
`<skipped>`. A file whose run stopped short (a syntax error, a policy refusal, a time limit, an import that
raised) gets one more testcase, `(whole file)`, holding the diagnosis as an `<error>`; so does a file that
failed with no failing test of its own (--strict on advisories, as a `<failure>`).

Written with xml.etree (which escapes markup) after the characters XML 1.0 cannot hold at all are shown
as \\xNN, atomically through drill/safe_files.py. `writable_target` refuses a path that cannot be written
(missing folder, a folder, another user's file) before anything is graded.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from drill.errors import UserError

# Everything XML 1.0 forbids (its Char production): C0 controls but tab/LF/CR, surrogates, U+FFFE/U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
WHOLE_FILE = "(whole file)"


def writable_target(path: Path) -> Path:
    """The file `--junit PATH` will replace, checked before grading; UserError (one line, exit 2) when the
    report could not be written there: its folder missing or not writable, a folder, or not ours."""
    from drill.safe_files import resolve_target

    target = resolve_target(Path(path))
    folder = target.parent
    if not folder.is_dir():
        raise UserError("--junit: its folder does not exist (create it first)", str(path))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError("--junit: its folder is not writable", str(path))
    return target


def write_report(path: Path, results: list[Any], elapsed_s: float | None = None) -> Path:
    """Write the report atomically (the old file stays whole if anything fails); UserError on failure."""
    from drill.safe_files import write_atomic

    return write_atomic(path, to_junit(results, elapsed_s))


def to_junit(results: list[Any], elapsed_s: float | None = None) -> bytes:
    """The JUnit XML document of `results` (one testsuite each), UTF-8 with its declaration."""
    root = ET.Element("testsuites", name="drill check")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for r in results:
        suite = _suite(r)
        root.append(suite)
        for k in totals:
            totals[k] += int(suite.get(k, "0"))
    for k in ("tests", "failures", "errors"):  # junit-10.xsd's <testsuites> has no `skipped`
        root.set(k, str(totals[k]))
    root.set("time", _time(elapsed_s if elapsed_s is not None else sum(r.elapsed_s for r in results)))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _suite(r: Any) -> ET.Element:
    suite = ET.Element("testsuite", name=_x(r.file))
    props = ET.SubElement(suite, "properties")
    for name, value in (("exercise", r.exercise), ("status", r.status), ("seed", str(r.seed)),
                        ("device", r.device), ("replay", f"drill check {r.file} --seed {r.seed}")):
        ET.SubElement(props, "property", name=name, value=_x(value))
    d = r.diagnosis
    label = f"{d.title} [{d.id}]" if d is not None else f"failed [{r.status}]"
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for t in r.tests:
        case = ET.SubElement(suite, "testcase", classname=_x(r.exercise), name=_x(t.name))
        counts["tests"] += 1
        if t.status == "not_run":
            ET.SubElement(case, "skipped", message=_x(f"not run: {label}" if d is not None else "not run"))
            counts["skipped"] += 1
        elif t.status in ("fail", "error"):
            kind = "failure" if t.status == "fail" else "error"
            el = ET.SubElement(case, kind, message=_x(label), type=_x(d.id if d is not None else r.status))
            el.text = _x(_body(r, t))
            counts["failures" if kind == "failure" else "errors"] += 1
    cut_short = not r.tests or any(t.status == "not_run" for t in r.tests)
    unexplained = r.status != "pass" and not any(t.status in ("fail", "error") for t in r.tests)
    if r.status != "pass" and (cut_short or unexplained):
        case = ET.SubElement(suite, "testcase", classname=_x(r.exercise), name=WHOLE_FILE)
        counts["tests"] += 1
        kind = "failure" if r.tests and not cut_short else "error"
        el = ET.SubElement(case, kind, message=_x(label), type=_x(d.id if d is not None else r.status))
        el.text = _x(_body(r, None))
        counts["failures" if kind == "failure" else "errors"] += 1
    for k, v in counts.items():
        suite.set(k, str(v))
    suite.set("time", _time(r.elapsed_s))
    return suite


def _body(r: Any, t: Any) -> str:
    """The test's message, then the diagnosis (why, fix, detail), the error sizes and the seed to replay."""
    from drill.judge.boundary import safe_text

    lines = []
    if t is not None and t.message:
        lines.append(t.message)
    d = r.diagnosis
    if d is not None:
        lines += [f"{d.title} [{d.id}]", f"Why: {d.why}", f"Fix: {d.fix}"]
    if r.diagnosis_detail:
        lines.append(r.diagnosis_detail)
    abs_err = t.max_abs if t is not None else r.max_abs
    rel_err = t.max_rel if t is not None else r.max_rel
    if abs_err is not None:
        rel = f", max rel err {rel_err:.3g}" if rel_err is not None else ""
        lines.append(f"max abs err {abs_err:.3g}{rel}")
    lines.append(f"seed {r.seed} (replay: drill check {r.file} --seed {r.seed})")
    return "\n".join(safe_text(line, 4000) for line in lines)


def _time(seconds: float) -> str:
    return f"{max(0.0, float(seconds)):.3f}"


def _x(text: Any) -> str:
    """`text` with the characters XML 1.0 cannot represent (even as references) shown as \\xNN / \\uNNNN."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", str(text))
