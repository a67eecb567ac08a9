"""What `drill.check(exercise, obj)` grades for a Python object: a file, or a source text written to one.

The rule (README.md, "In a notebook"):
- a path (str or os.PathLike) or a module with a source file: that file, exactly as `drill check FILE`;
- a function or a class, or a tuple of them: their own source (`inspect.getsource`), preceded by one
  import line for each module its source names (`torch`, `F`, `nn`, `math`), rebuilt from the
  module objects those names are bound to where it was defined, and a `from M import NAME` for a name
  bound to something an importable module exports under that name (`Tensor`, `Optional`). Nothing
  else travels: a helper, a constant or a class of your own that lives outside the object's source is
  refused in one line naming it (define it inside, or grade the whole cell with `%%drill` or the file),
  because the grader runs a file in a fresh process, which would otherwise fail with a NameError far
  from the cause. Every graded name of the exercise must be among the objects, under its own name.
- anything else (a builtin, a lambda, an instance, an object whose source Python did not keep):
  a `UserError` with one line saying why.

Stdlib only: `import drill; drill.check` must not import torch before a check runs.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import os
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drill.errors import UserError


@dataclass
class GradedSource:
    """A file to grade as it is (`path`), or a text to write to a private file first (`text`)."""

    path: Path | None
    text: str | None
    label: str  # the result's `file`: the path as given, or `<name>` for objects


def graded_source(obj: Any, exercise: str, graded: tuple[str, ...]) -> GradedSource:
    """What grading `obj` as `exercise` (whose graded names are `graded`) means; UserError when nothing can."""
    if isinstance(obj, (str, os.PathLike)):
        return _path(obj)
    if isinstance(obj, types.ModuleType):
        return _module(obj)
    objects = list(obj) if isinstance(obj, (tuple, list)) else [obj]
    if not objects:
        raise UserError(f"nothing to grade: an empty {type(obj).__name__}")
    for o in objects:
        _gradable(o)
    names = [o.__name__ for o in objects]
    for name in names:
        if name not in graded:
            raise UserError(f"{exercise} grades {_names(graded)}; `{name}` is not one of them (name it as the "
                            "exercise does, or pass the module or file that defines it)")
    missing = [g for g in graded if g not in names]
    if missing:
        together = "(" + ", ".join(graded) + ")"
        raise UserError(f"{exercise} grades {_names(graded)}; {_names(tuple(missing))} "
                        f"{'is' if len(missing) == 1 else 'are'} missing: pass them together, "
                        f"drill.check({exercise!r}, {together}), or the module or file that defines them")
    body = "\n\n\n".join(_own_source(o) for o in objects)
    header = _import_header(body, objects)
    text = "\n".join(header) + ("\n\n\n" if header else "") + body
    return GradedSource(None, text, "<" + ", ".join(names) + ">")


def _names(names: tuple[str, ...]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _path(obj: str | os.PathLike) -> GradedSource:
    if isinstance(obj, str) and "\n" in obj:
        raise UserError("a str is taken as a path, and this one holds several lines: to grade source text, "
                        "use drill.check_source(exercise, text) or a %%drill cell")
    path = Path(obj)
    if path.is_dir():
        raise UserError("a folder: drill.check grades one file (`drill check DIR` grades a folder)", str(path))
    return GradedSource(path, None, str(obj))


def _module(module: types.ModuleType) -> GradedSource:
    try:
        where = inspect.getsourcefile(module)
    except TypeError:  # a built-in module, or __main__ of a notebook or a prompt
        where = None
    if not where or not os.path.isfile(where):
        raise UserError(f"module `{module.__name__}` has no Python source file to grade (a built-in or compiled "
                        "module, or an interactive session); pass a function, a class or a path")
    return GradedSource(Path(where), None, where)


def _gradable(obj: Any) -> None:
    """Refuse, in one line, an object that is not a Python function or class with source."""
    name = getattr(obj, "__name__", None)
    if inspect.isbuiltin(obj) or isinstance(obj, (types.MethodWrapperType, types.WrapperDescriptorType,
                                                  types.MethodDescriptorType, types.BuiltinMethodType)):
        raise UserError(f"`{name if name else repr(obj)}` is a built-in (C) function: it has no Python source to grade")
    if inspect.ismethod(obj):
        raise UserError(f"`{obj.__qualname__}` is a method: pass its class, or the function itself")
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        kind = type(obj)
        if kind.__module__ != "builtins":  # an nn.Module made from the graded class, a partial, ...
            raise UserError(f"got an instance of {kind.__name__}: pass the class or function itself")
        raise UserError("drill.check grades a function, a class, a tuple of them, a module or a path (str or "
                        f"Path); got {kind.__name__}")
    if name == "<lambda>":
        raise UserError("a lambda cannot be graded: the exercise calls its graded names, so define it with "
                        "`def NAME(...)` under that name")
    if "<locals>" in getattr(obj, "__qualname__", ""):
        raise UserError(f"`{obj.__qualname__}` is defined inside a function: the grader imports a file, "
                        "so define it at the top level of a cell or module")


def _own_source(obj: Any) -> str:
    """`inspect.getsource`, dedented; one line when Python kept none."""
    try:
        text = inspect.getsource(obj)
    except TypeError:  # a class or function implemented in C, or (Python < 3.13) a class of a notebook cell
        text = _class_source_from_methods(obj) if inspect.isclass(obj) else None
        if text is None:
            raise UserError(f"`{obj.__name__}` is built in: it has no Python source to grade") from None
    except OSError:  # defined at an interactive prompt, by exec, or its file is gone
        text = _class_source_from_methods(obj) if inspect.isclass(obj) else None
        if text is None:
            raise UserError(f"no source for `{obj.__name__}`: Python kept none where it was defined (an interactive "
                        "prompt, exec, a deleted file); define it in a notebook cell or a file") from None
    return textwrap.dedent(text).rstrip() + "\n"


def _class_source_from_methods(cls: type) -> str | None:
    """A class's statement found through its methods' code, or None.

    Why: before Python 3.13, `inspect.getsource` finds a class through its module's file, and a notebook
    cell's module (`__main__`) has none, though the cell's text is in linecache under the file name its
    functions' code carries (IPython puts it there). The class statement is the one named like the class
    that encloses a method's first line.
    """
    import linecache

    for value in vars(cls).values():
        func = getattr(value, "__func__", getattr(value, "fget", value))
        code = getattr(func, "__code__", None)
        if code is None:
            continue
        lines = linecache.getlines(code.co_filename)
        if not lines:
            continue
        try:
            tree = ast.parse("".join(lines))
        except SyntaxError:  # an IPython cell with magics: not plain Python
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == cls.__name__ \
                    and node.lineno <= code.co_firstlineno <= (node.end_lineno or 0):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                return "".join(lines[first - 1:node.end_lineno])
    return None


def _namespace(obj: Any) -> dict[str, Any]:
    """The module-level names the object saw where it was defined."""
    if inspect.isfunction(obj):
        return obj.__globals__
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    return vars(module) if module is not None else {}


def _import_header(body: str, objects: list[Any]) -> list[str]:
    """One import line per free name of `body` bound to a module or an importable export; refuse the rest."""
    tree = ast.parse(body)
    bound, used = _bound_and_used(tree)
    lines: list[str] = []
    outside: list[str] = []
    for name in sorted(used - bound):
        if hasattr(builtins, name):
            continue
        value = _MISSING
        for obj in objects:
            value = _namespace(obj).get(name, _MISSING)
            if value is not _MISSING:
                break
        if value is _MISSING:
            continue  # unbound where it was defined too: the grader reports the NameError, as for a file
        own = {getattr(o, "__module__", None) for o in objects}  # a helper beside the object is not an import
        line = None if getattr(value, "__module__", None) in own and not isinstance(value, types.ModuleType) \
            else _import_line(name, value)
        if line is None:
            outside.append(name)
        else:
            lines.append(line)
    if outside:
        what = _names(tuple(outside))
        raise UserError(f"the source of {_names(tuple(o.__name__ for o in objects))} uses {what}, defined outside "
                        "it: a function or class is graded alone, with only the imports it uses; define "
                        f"{'it' if len(outside) == 1 else 'them'} inside, or grade the whole cell (%%drill) "
                        "or file")
    return sorted(lines, key=lambda s: (s.startswith("from "), s))


_MISSING = object()


def _import_line(name: str, value: Any) -> str | None:
    if isinstance(value, types.ModuleType):
        module = value.__name__
        return f"import {module}" if module == name else f"import {module} as {name}"
    module = getattr(value, "__module__", None)
    if not isinstance(module, str) or module in ("__main__", "builtins") or module.startswith("__"):
        return None
    home = sys.modules.get(module)
    if home is None or getattr(home, "__file__", None) is None or getattr(home, name, _MISSING) is not value:
        return None
    return f"from {module} import {name}"


def _bound_and_used(tree: ast.AST) -> tuple[set[str], set[str]]:
    """Names the source binds anywhere (over-approximated: any scope), and names it loads."""
    bound: set[str] = set()
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, used
