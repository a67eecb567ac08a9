"""`drill mock`: a timed mock interview built from the quiz engine and the grader.

Modules: clock (injectable time), reader (line input with a deadline), plan
(what to ask, which exercise, where the file goes), live (the countdown on a
terminal), context (what both rounds share), concept and coding (the two
rounds), report (scoring, report card, history), interrupted (mocks whose
process died), run (the whole session as one function) and commands (the
`drill mock` command).
"""
