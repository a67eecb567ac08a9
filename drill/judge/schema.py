"""The field names of `drill check --json`, in one place (as drill/bench/schema.py does for bench).

`Result.to_json` writes exactly these fields, `drill check --help` lists them
(`outline`), and tests/test_judge_schema.py holds both, and the README's
`--json` block, to this list: a field added in one place and forgotten in
another fails a test. No torch here (the CLI's help text is built from it).
"""

from __future__ import annotations

import textwrap

VERSION = 3  # 3: adds "device" and "reference_backend" (issue 17); 2: "version" and "layers" (issue 13)

TOP_FIELDS: tuple[str, ...] = (
    "version", "exercise", "file", "status", "seed", "elapsed_s", "tests_passed", "tests_total", "max_abs_err",
    "max_rel_err", "tests", "diagnosis", "advisories", "audit", "layers", "device", "reference_backend",
)
TEST_FIELDS: tuple[str, ...] = ("name", "status", "message", "max_abs_err", "max_rel_err")
DIAGNOSIS_FIELDS: tuple[str, ...] = ("id", "title", "why", "fix", "detail", "partial")
# Which of the grader's defences were active for this file (drill/judge/README.md, "Known limits").
LAYER_FIELDS: tuple[str, ...] = ("policy", "kernels", "sandbox", "parent")


def outline(width: int = 76) -> str:
    """The document's shape in one wrapped paragraph, for `--help` (square brackets escaped for Rich)."""
    parts = []
    for f in TOP_FIELDS:
        if f == "tests":
            parts.append("tests \\[{" + ", ".join(TEST_FIELDS) + "}]")
        elif f == "diagnosis":
            parts.append("diagnosis {" + ", ".join(DIAGNOSIS_FIELDS) + "} or null")
        elif f == "layers":
            parts.append("layers {" + ", ".join(LAYER_FIELDS) + "}")
        elif f in ("advisories", "audit"):
            parts.append(f + " \\[str]")
        else:
            parts.append(f)
    return textwrap.fill(", ".join(parts), width=width, break_on_hyphens=False)
