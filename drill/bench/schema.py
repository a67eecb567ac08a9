"""The field names of `drill bench --json`, in one place.

`BenchReport.to_json` writes these fields, `drill bench --help` lists them
(`outline`), and the tests hold both, and the README's `--json` block, to
this list against a real run: a field added in one place and forgotten in
another fails a test instead of misleading a tool author. No torch here (the
CLI's help text is built from it at import).
"""

from __future__ import annotations

import textwrap

# Top level, in the order the document has them; "sizes" holds SIZE_FIELDS.
TOP_FIELDS: tuple[str, ...] = (
    "exercise", "file", "device", "device_name", "dtype", "threads", "torch", "seed", "check_seed",
    "size_name", "size_label", "dims", "peak_bandwidth_gb_s", "datasheet_bandwidth_gb_s", "sizes", "exponents",
    "memory_exponents",
    "expected_exponent", "expected_note", "warnings", "stopped", "stop_reason", "learner_error", "cut_short",
    "exit_code", "host_peak_rss_mb", "sandbox", "elapsed_s",
)
# One size of the ladder; "results" maps learner|fused|math to RESULT_FIELDS.
SIZE_FIELDS: tuple[str, ...] = ("size", "elapsed_s", "results")
# One implementation at one size.
RESULT_FIELDS: tuple[str, ...] = (
    "status", "median_s", "q1_s", "q3_s", "min_s", "max_s", "reps", "tokens_per_s", "bandwidth_gb_s",
    "bandwidth_fraction", "datasheet_fraction", "peak_bytes", "ratio_to_fused", "message",
)


def outline(width: int = 76) -> str:
    """The document's shape in one wrapped paragraph, for `--help`."""
    results = "{learner|fused|math: {" + ", ".join(RESULT_FIELDS) + "}}"
    sizes = "sizes [{" + ", ".join(f if f != "results" else f"results {results}" for f in SIZE_FIELDS) + "}]"
    text = ", ".join(sizes if f == "sizes" else f for f in TOP_FIELDS)
    return textwrap.fill(text, width=width, break_on_hyphens=False)
