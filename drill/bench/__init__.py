"""`drill bench`: how fast is a passing solution, and how does it scale?

Times a learner's implementation next to the reference model's fused and
math paths on the same inputs, over a ladder of sizes, inside the grader's
isolated child process, and fits a growth exponent so that an O(T^2)
recompute or a materialised T x T matrix stands out. See README.md in this
folder for the JSON format and how each number is measured.

Modules: `workloads` (what is run at each size, per exercise), `stats`
(medians, spreads, exponent fit; pure Python), `memory` (the CPU allocation
audit), `child` (the script run in the isolated process), `run` (the
parent's side), `report` (tables, plot, JSON), `schema` (the --json
field names, shared with --help) and `commands` (the `drill bench` command).
"""
