"""The debug round: a mini GPT written with planted bugs (`drill start debug_gpt`), torch-free.

`template.py` holds the bug-free file with its variant slots, `bugs.py` the bug library (data),
`plant.py` draws and plants them, `header.py` reads line 1 back. The grader's side is
`drill/judge/specs/debug_gpt.py` (parent) and `drill/judge/dgpt.py` (child).
"""
