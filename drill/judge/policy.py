"""Layer 1 of the grader's defences: a static policy on the learner's source, checked before anything runs.

A solution to these exercises needs tensors, `nn.Module`, a little math and
the odd dataclass or cache; it never needs to import `os`, reach
`torch._C`, compile TorchScript, start a thread or read a file. So the file
is parsed (ast, nothing executed) and refused with `policy_violation`,
quoting `file:line` and what is allowed, when it uses anything only an
attacker needs:

- imports outside `ALLOWED_IMPORTS` (torch and its math namespaces, numpy,
  einops, a few pure stdlib modules), relative and `*` imports;
- the builtins that run or reach code by name (`BLOCKED_NAMES`: `eval`,
  `exec`, `compile`, `open`, `__import__`, `globals`, `vars`, ...), and
  `getattr`/`setattr`/`delattr` except called with a literal name, which is
  then checked like `obj.name`, and what else reaches attributes by string
  (`functools.update_wrapper`, `wraps(f, assigned=...)`,
  `operator.attrgetter`); `setattr(self, name, ...)` in a loop over layer
  names is the one computed-name call allowed. Only the builtins themselves:
  a name the file binds (`def forward(self, input)`, `input = input.contiguous()`)
  is its own where Python's scoping says so (drill/judge/scopes.py);
- attributes that lead out of torch's tensor API (`BLOCKED_ATTRS`:
  `torch.jit`, `torch.ops`, `torch.library`, `torch.utils`, `torch.compile`,
  `torch.load`/`save`, file and frame access, and any attribute named like a
  stdlib module, e.g. `torch.os`), dunder attributes beyond the few ordinary
  classes use (`super().__init__`, `type(self).__name__`), and private
  `_names` the file does not define itself (`self._cache` is fine,
  `torch._C` is not); a private of a module, or of anything reached from an
  import, is refused even when the file defines the name too (otherwise
  `_sys = 0` would let `collections._sys` through, and with it `sys`), and
  so is importing a private name (`from collections import _sys`);
- assigning to or deleting an attribute of an imported module or of what it
  defines (`torch.tensor = ...`, `F.softmax = ...`, `torch.Tensor.x = ...`,
  `setattr(torch, "allclose", ...)`): the grader's code in the child uses the
  same torch, so such a file could rewrite the measurement it is judged by.

The body of `if __name__ == "__main__":` is not checked (it never runs when
graded; people put timing and prints there), unless the file rebinds
`__name__` (in any binding form, a `match` capture included). Plain calls
of an exercise's forbidden op (`F.scaled_dot_product_attention`) are
allowed here on purpose: the child's runtime traps name them as
`forbidden_op`, with the line.

This is a guard for honest verdicts, not the only one: the child blocks the
forbidden kernels below Python and the OS sandbox contains what slips past
(see drill/judge/README.md, "Known limits").
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from drill.judge.scopes import own_name_loads
from drill.judge.source import clip, parse

# Modules a solution may import (a submodule of an allowed package is allowed when listed).
ALLOWED_IMPORTS: tuple[str, ...] = (
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.parameter", "torch.nn.modules",
    "torch.nn.attention", "torch.autograd", "torch.autograd.function", "torch.linalg", "torch.fft", "torch.special",
    "torch.types", "torch.cuda", "torch.amp",
    # adamw subclasses torch.optim.Optimizer (`from torch.optim import Optimizer`); the ready-made optimizers
    # are trapped at run time by that exercise's forbidden set, like any library op
    "torch.optim", "torch.optim.optimizer",
    "numpy", "einops", "einops.layers", "einops.layers.torch",
    "math", "cmath", "typing", "typing_extensions", "dataclasses", "functools", "itertools", "collections",
    "collections.abc", "__future__", "abc", "enum", "numbers", "copy", "warnings", "random", "operator",
    "contextlib", "fractions", "statistics", "heapq", "bisect", "decimal",
    # time: people time their code (perf_counter); a sleep only spends the learner's own wall-clock limit
    "time",
)
_ALLOWED_PREFIXES = ("torch.nn.modules.", "torch.nn.init.", "einops.layers.")

# Builtins that execute code, reach objects by name or touch files/the interpreter.
BLOCKED_NAMES = frozenset({
    "__import__", "eval", "exec", "compile", "open", "globals", "vars", "locals", "breakpoint", "input", "help",
    "__builtins__", "__loader__", "__spec__", "__file__", "__cached__", "__package__", "__path__",
    "copyright", "credits", "license",
})
_ATTR_BUILTINS = ("getattr", "setattr", "delattr")
# The refused builtins a file may use as names of its own (`def forward(self, input)`, `open = []`): a load
# of one is refused only where it may reach the builtin (drill/judge/scopes.py). The dunders stay refused
# under any binding, and so does importing one of these names from a module (`from m import open` would
# bind whatever the module calls `open`; no allowed module has one but torch.compile, itself refused).
SHADOWABLE = frozenset(n for n in BLOCKED_NAMES | set(_ATTR_BUILTINS) if not n.startswith("__"))

# Attribute names that lead out of the tensor API, whatever object they are read from
# (`t = torch; t.jit` is refused like `torch.jit`).
BLOCKED_ATTRS = frozenset({
    # torch namespaces only an attacker needs
    "jit", "ops", "library", "utils", "compile", "compiler", "classes", "fx", "export", "hub", "package",
    "overrides", "serialization", "profiler", "testing", "distributed", "cpp", "monitor", "futures", "onnx",
    "jiterator", "tunable", "parallel", "multiprocessing",
    "ao",  # quantization: torch.ao.nn.quantizable.MultiheadAttention is a whole attention in Python
    # files, pickles and shared memory
    "load", "save", "from_file", "fromfile", "tofile", "memmap", "open_memmap", "loadtxt", "savetxt", "savez",
    "savez_compressed", "genfromtxt", "fromregex", "share_memory_", "export_chrome_trace", "ctypes",
    # numpy's ways out
    "ctypeslib", "f2py", "lib", "distutils", "rec", "core",
    # frames, code objects, string evaluation
    "gi_frame", "gi_code", "cr_frame", "ag_frame", "f_back", "f_globals", "f_locals", "f_builtins", "f_code",
    "tb_frame", "tb_next", "co_code", "co_consts", "get_type_hints", "singledispatch", "singledispatchmethod",
    "register", "attrgetter", "methodcaller", "stdlib_re",
    # reach attributes by names held in strings (update_wrapper(updated=("__globals__",)) reads a function's
    # globals, assigned=("__builtins__",) writes its builtins): a computed attribute access in disguise
    "update_wrapper",
})
# Names that must keep their meaning: rebinding one makes the main block run (`__name__`) or swaps what every
# name resolves to; refused under every binding form (assignment, walrus, import, match capture, ...).
PROTECTED_NAMES = ("__name__", "__builtins__", "__import__")
# Modules that are reachable as attributes of allowed ones (torch.os, torch.sys, typing.sys,
# dataclasses.inspect, F.importlib, ...) or that only an attacker needs, refused under any name.
_STDLIB = frozenset({
    "os", "sys", "subprocess", "importlib", "builtins", "ctypes", "inspect", "platform", "shutil", "pathlib",
    "io", "pickle", "copyreg", "threading", "_thread", "multiprocessing", "concurrent", "asyncio", "signal",
    "socket", "ssl", "http", "urllib", "gc", "weakref", "types", "traceback", "glob", "tempfile", "mmap",
    "marshal", "runpy", "pkgutil", "codeop", "pdb", "bdb", "posix", "nt", "faulthandler", "resource", "fcntl",
    "pty", "tty", "termios", "atexit", "site", "sysconfig", "zipimport", "shelve", "dbm", "sqlite3", "tarfile",
    "zipfile", "webbrowser", "logging", "textwrap", "keyword", "dis", "ast", "tokenize", "linecache", "zipapp",
    "posixpath", "genericpath", "stat", "fnmatch", "json", "string", "pydoc", "code", "timeit", "select",
    "selectors", "queue", "sched", "contextvars", "_io", "_ctypes", "_posixsubprocess", "_signal", "np",
    # the same modules under the aliases allowed modules import them as (enum: `import builtins as bltns`);
    # tests/test_judge_policy.py walks the allowed modules and fails on any alias missing here
    "bltns",
})
_STDLIB = _STDLIB - {"np", "select"}  # np is numpy (allowed); x.select(dim, i) is a tensor method
# torch/numpy privates refused even when the file defines a name like them.
BLOCKED_PRIVATE = frozenset({
    "_C", "_VF", "_ops", "_dynamo", "_inductor", "_refs", "_prims", "_decomp", "_library", "_jit_internal",
    "_functorch", "_subclasses", "_higher_order_ops", "_utils", "_C_flatbuffer", "_export", "_classes",
    "_sources", "_jit", "_lazy", "_dispatch", "_python_dispatch", "_custom_ops", "_custom_op", "_tensor",
    "_numpy", "_vendor", "_multiarray_umath", "_core", "_pytesttester", "_backends", "_guards", "_logging",
    "_meta_registrations", "_prims_common", "_python_dispatcher", "_nn", "_compile", "_utils_internal",
    "_weights_only_unpickler", "_storage_docs", "_tensor_str", "_torch_docs", "_linalg_utils", "_namedtensor_internals",
    "_make_subclass", "_make_wrapper_subclass", "_disable_current_modes", "_get_current_dispatch_mode",
    # privates of the standard library that run code or reach frames and modules, on whatever object they are
    # read from (typing.ForwardRef("...")._evaluate(...) is an eval; a function argument hides the module)
    "_evaluate", "_eval_type", "_create_fn", "_getcategory", "_setoption", "_caller", "_getframe",
    "_getframemodulename", "_current_frames", "_destroy", "_sys", "_os", "_imp", "_bootstrap", "_weakref", "_thread",
})
# Dunder attributes ordinary classes use; every other __x__ attribute is refused.
ALLOWED_DUNDER_ATTRS = frozenset({
    "__init__", "__name__", "__qualname__", "__doc__", "__class__", "__call__", "__len__", "__repr__", "__str__",
    "__setattr__", "__getitem__", "__iter__", "__next__", "__enter__", "__exit__", "__post_init__",
})
ALLOWED_DUNDER_NAMES = frozenset({"__name__", "__doc__", "__class__", "__all__", "__version__", "__slots__"})

ALLOWED_SUMMARY = (
    "allowed: imports of torch (torch.nn, torch.nn.functional, ...), numpy, einops, math, typing, dataclasses, "
    "functools, itertools, collections and other pure-Python helpers; tensor code, classes and functions. "
    "Not allowed: eval/exec/compile/open/__import__/globals/vars, getattr with a computed name, torch.jit, "
    "torch.compile, torch.ops, torch._C and other torch privates, torch.library, torch.utils, torch.load/save, "
    "dunder attributes beyond __init__/__name__/__class__, other modules"
)


# Packages one exercise may import beyond ALLOWED_IMPORTS (its index entry's `imports`), and nowhere else:
# a Triton kernel needs `triton` and `triton.language`, but only a CUDA-only exercise can launch one, and
# every package allowed is more API this blocklist has to fence. `exempt`: names refused everywhere else
# that the package's ordinary use needs, allowed only on a name the file bound by importing it
# (`triton.jit`, `tl.load`; `torch.jit` and `torch.load` stay refused). `blocked`: the package's own ways
# out, refused on any object in such a file (triton.knobs can swap the compiler hook, triton.runtime loads
# binaries, triton.backends and triton.tools run compilers and drivers).
EXTRA_IMPORTS: dict[str, dict] = {
    # bpe: GPT-2's pre-tokenizer needs the `regex` package (\p{L}, \p{N}); `re` splits at the special tokens.
    # `compile` is refused everywhere else (torch.compile); here on a name bound by `import regex` / `import re`.
    "regex": {
        "modules": ("regex", "re"),
        "prefixes": (),
        "exempt": frozenset({"compile"}),
        "blocked": frozenset(),
    },
    "triton": {
        "modules": ("triton", "triton.language"),
        "prefixes": ("triton.language.",),
        "exempt": frozenset({"jit", "load"}),
        "blocked": frozenset({"knobs", "runtime", "backends", "tools", "instrumentation", "experimental", "driver",
                              "build", "set_allocator"}),
    },
}


@dataclass(frozen=True)
class Profile:
    """What one exercise adds to the policy (built from its `imports`)."""

    modules: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    exempt: frozenset[str] = frozenset()
    blocked: frozenset[str] = frozenset()

    @classmethod
    def of(cls, packages: tuple[str, ...] | list[str] = ()) -> Profile:
        parts = [EXTRA_IMPORTS[p] for p in packages]
        return cls(frozenset(m for part in parts for m in part["modules"]),
                   tuple(x for part in parts for x in part["prefixes"]),
                   frozenset(x for part in parts for x in part["exempt"]),
                   frozenset(x for part in parts for x in part["blocked"]))

    def imports(self, module: str) -> bool:
        return module in self.modules or module.startswith(self.prefixes) if self.modules else False


@dataclass(frozen=True)
class Violation:
    """One refused construct: where, what, and the line as written (clipped)."""

    line: int
    what: str
    source: str = ""

    def detail(self, path: str | Path, more: int = 0) -> str:
        from drill.judge.boundary import safe_text

        quoted = f": {safe_text(self.source, 200)}" if self.source else ""
        extra = f" (and {more} more)" if more else ""
        return f"{path}:{self.line}: {self.what}{extra}{quoted} — {ALLOWED_SUMMARY}"


def import_allowed(module: str, profile: Profile | None = None) -> bool:
    return module in ALLOWED_IMPORTS or module.startswith(_ALLOWED_PREFIXES) or (
        profile is not None and profile.imports(module))


def _is_main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (either operand order)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def _defined_names(nodes: list[ast.AST]) -> set[str]:
    """Every name the file binds itself: defs, classes, assignment targets, attributes stored, arguments,
    and literal names handed to register_buffer/register_parameter/setattr."""
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else (fn.id if isinstance(fn, ast.Name) else "")
            if name in ("register_buffer", "register_parameter", "register_module", "add_module") and isinstance(
                node.args[0].value, str
            ):
                out.add(node.args[0].value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                out.add(node.args[1].value)
    return out


def _match_captures(node: ast.AST) -> list[str]:
    """The names a `match` pattern binds (`case x`, `case [*rest]`, `case {**rest}`)."""
    if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []


def _import_aliases(nodes: list[ast.AST]) -> set[str]:
    """Names that hold a module, or a class or function read straight off one: every name an import binds,
    and names assigned a plain attribute chain rooted at one (`m = torch`, `T = torch.Tensor`, `F2 = F`), but
    not a call's result (`lin = nn.Linear(2, 2)` is the file's own object, whose attributes it may set)."""
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    assigns = [n for n in nodes if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and n.value is not None]
    changed = True
    while changed:
        changed = False
        for node in assigns:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _plain_root(node.value) not in out:
                continue
            for t in targets:
                if isinstance(t, ast.Name) and t.id not in out:
                    out.add(t.id)
                    changed = True
    return out


def _plain_root(node: ast.AST) -> str | None:
    """`a` for `a` or `a.b.c` (attributes only, no call or subscript), else None."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _rebinds_name(nodes: list[ast.AST]) -> bool:
    """Does the file assign `__name__` anywhere (which would make its main block run when graded)?"""
    for node in nodes:
        if "__name__" in _match_captures(node):
            return True
        if isinstance(node, ast.Name) and node.id == "__name__" and not isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, (ast.Global, ast.Nonlocal)) and "__name__" in node.names:
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name) == "__name__":
            return True
        if isinstance(node, ast.arg) and node.arg == "__name__":
            return True
        if isinstance(node, ast.ExceptHandler) and node.name == "__name__":
            return True
    return False


def _module_names(nodes: list[ast.AST]) -> set[str]:
    """Names that may hold a module or something made by one: every name an import binds, and names assigned
    from an expression rooted at one (`m = collections`, `t = torch.nn`, `fr = typing.ForwardRef("x")`)."""
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    assigns = [n for n in nodes if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr))]
    changed = True
    while changed:
        changed = False
        for node in assigns:
            targets = []
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                targets, value = [node.target], node.value
            if not targets or _chain_root(value) not in out:
                continue
            for t in targets:
                if isinstance(t, ast.Name) and t.id not in out:
                    out.add(t.id)
                    changed = True
    return out


def _chain_root(node: ast.AST) -> str | None:
    """`a` for `a`, `a.b.c`, `a.b(...)`, `a.b[...]`, `a(...).c`: the name everything was reached from, else None."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _extra_roots(nodes: list[ast.AST], profile: Profile) -> set[str]:
    """Names the file bound by importing one of the profile's own modules (`import triton`, `import triton as tr`)."""
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if profile.imports(a.name):
                    out.add(a.asname or a.name.split(".")[0])
    return out


class _Checker(ast.NodeVisitor):
    def __init__(self, defined: set[str], modules: set[str] | None = None, profile: Profile | None = None,
                 extra_roots: set[str] | None = None, own_loads: set[int] | None = None,
                 aliases: set[str] | None = None) -> None:
        self.defined = defined
        self.aliases = aliases or set()  # names holding a module or something read straight off one
        self.own_loads = own_loads or set()  # id() of loads of a SHADOWABLE name that are the file's own
        self.modules = modules or set()
        self.profile = profile or Profile()
        self.extra_roots = extra_roots or set()
        self.found: list[tuple[int, str]] = []
        self._allowed_refs: set[int] = set()  # id() of Name nodes used as the callee of an allowed call

    def flag(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), what))

    # -- imports -------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not import_allowed(alias.name, self.profile):
                self.flag(node, f"`import {alias.name}` is not allowed")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.flag(node, "relative imports are not allowed (a solution is one self-contained file)")
        elif not import_allowed(module, self.profile):
            self.flag(node, f"`from {module} import ...` is not allowed")
        else:
            for alias in node.names:
                if alias.name == "*":
                    self.flag(node, f"`from {module} import *` is not allowed (import the names you use)")
                    continue
                if alias.name in SHADOWABLE:
                    self.flag(node, f"`from {module} import {alias.name}`: `{alias.name}` is not allowed")
                    continue
                own = self.profile.imports(module) and alias.name in self.profile.exempt
                why = None if own else self._attr_problem(alias.name, on_module=True)
                full = f"{module}.{alias.name}"
                if why is not None and not import_allowed(full, self.profile):
                    self.flag(node, f"`from {module} import {alias.name}`: {why}")
        self.generic_visit(node)

    # -- names and attributes -----------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if isinstance(node.ctx, ast.Load):
            if id(node) in self.own_loads:
                return  # the file's own parameter, local or global of that name, not the builtin
            if name in SHADOWABLE and name in self.defined:
                self.flag(node, f"`{name}` here may be the builtin, which is not allowed (the file's own `{name}` "
                                "is bound only later, on one branch, or in another scope: bind it where it is used)")
            elif name in BLOCKED_NAMES:
                self.flag(node, f"`{name}` is not allowed")
            elif name in _ATTR_BUILTINS and id(node) not in self._allowed_refs:
                self.flag(node, f"`{name}` is allowed only as a call with a literal attribute name")
            elif _is_dunder(name) and name not in ALLOWED_DUNDER_NAMES:
                self.flag(node, f"`{name}` is not allowed")
        elif name in PROTECTED_NAMES:
            self.flag(node, f"rebinding `{name}` is not allowed")

    def _visit_match_pattern(self, node: ast.AST) -> None:
        for name in _match_captures(node):
            if name in PROTECTED_NAMES:
                self.flag(node, f"rebinding `{name}` (a match capture) is not allowed")
        self.generic_visit(node)

    visit_MatchAs = visit_MatchStar = visit_MatchMapping = _visit_match_pattern

    def visit_Attribute(self, node: ast.Attribute) -> None:
        store = not isinstance(node.ctx, ast.Load)
        exempt = (not store and node.attr in self.profile.exempt and isinstance(node.value, ast.Name)
                  and node.value.id in self.extra_roots)  # `triton.jit`, read straight off the import
        why = None if exempt else self._attr_problem(node.attr, store=store, on_module=self._on_module(node.value))
        if why is None and store and self._names_module(node.value):
            why = self._module_store(node.value)
        if why is not None:
            self.flag(node, f"`.{node.attr}`: {why}")
        self.generic_visit(node)

    def _names_module(self, base: ast.AST) -> bool:
        """Is `base` a module, or a class or function read straight off one (`torch`, `F`, `torch.Tensor`)?"""
        return _plain_root(base) in self.aliases

    @staticmethod
    def _module_store(base: ast.AST) -> str:
        return (f"assigning to an attribute of `{ast.unparse(base)}` (an imported module or what it defines) is "
                "not allowed: it would change torch for the grader's own code too")

    def visit_Call(self, node: ast.Call) -> None:
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id in _ATTR_BUILTINS and id(fn) not in self.own_loads:
            store = fn.id != "getattr"
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                self._allowed_refs.add(id(fn))
                why = self._attr_problem(node.args[1].value, store=store, on_module=self._on_module(node.args[0]))
                if why is None and store and self._names_module(node.args[0]):
                    why = self._module_store(node.args[0])
                if why is not None:
                    self.flag(node, f"`{fn.id}(..., {node.args[1].value!r})`: {why}")
            else:
                self._allowed_refs.add(id(fn))
                on_self = fn.id == "setattr" and node.args and isinstance(node.args[0], ast.Name) \
                    and node.args[0].id == "self"  # `for name in (...): setattr(self, name, nn.Linear(...))`
                if not on_self:
                    self.flag(node, f"`{fn.id}` with a computed attribute name is not allowed (write obj.name)")
        callee = fn.attr if isinstance(fn, ast.Attribute) else (fn.id if isinstance(fn, ast.Name) else "")
        if callee == "wraps" and (len(node.args) > 1 or node.keywords):
            self.flag(node, "`wraps` with `assigned`/`updated` reaches attributes by name; use plain `@wraps(f)`")
        self.generic_visit(node)

    def _on_module(self, base: ast.AST) -> bool:
        return _chain_root(base) in self.modules

    def _attr_problem(self, attr: str, store: bool = False, on_module: bool = False) -> str | None:
        """Why `<obj>.attr` is refused, or None. `on_module`: the object may be a module (rooted at an import),
        whose privates are refused even when the file defines a name like them (`collections._sys`)."""
        if attr in BLOCKED_ATTRS or attr in self.profile.blocked:
            return "not needed by a solution and not allowed"
        if attr in _STDLIB:
            return f"reaches the `{attr}` module, which is not allowed"
        if _is_dunder(attr):
            if store or attr not in ALLOWED_DUNDER_ATTRS:
                return "dunder attributes other than __init__/__name__/__class__ are not allowed"
            return None
        if attr.startswith("_") and not attr.startswith("__"):
            if attr in BLOCKED_PRIVATE:
                return "a private of torch, numpy or the standard library that no solution needs, not allowed"
            if on_module:
                return "a private attribute of a module or of something imported, not allowed"
            if attr not in self.defined:
                return "a private attribute this file does not define (torch's privates are not allowed)"
        return None


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def check_source(source: str, filename: str = "<learner>", extra: tuple[str, ...] = ()) -> list[Violation]:
    """Every violation of the policy in `source`, in line order (empty: allowed). SyntaxError propagates.

    `extra`: the exercise's additional packages (`EXTRA_IMPORTS` keys, the index entry's `imports`).
    """
    tree = parse(source, filename)
    nodes = list(ast.walk(tree))  # one walk for the four passes over the whole file (each was its own walk)
    lines = source.splitlines()
    skip_main = not _rebinds_name(nodes)
    profile = Profile.of(extra)
    checker = _Checker(_defined_names(nodes), _module_names(nodes), profile, _extra_roots(nodes, profile),
                       own_name_loads(tree, SHADOWABLE), _import_aliases(nodes))
    for stmt in tree.body:
        if skip_main and _is_main_guard(stmt):
            checker.visit(stmt.test)
            for sub in stmt.orelse:
                checker.visit(sub)
            continue
        checker.visit(stmt)
    seen: set[tuple[int, str]] = set()
    out = []
    for line, what in sorted(checker.found):
        if (line, what) in seen:
            continue
        seen.add((line, what))
        text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        out.append(Violation(line, what, clip(text) if text else ""))
    return out


def first_violation(source: str, path: str | Path, extra: tuple[str, ...] = ()) -> str | None:
    """The one-line `policy_violation` detail for a refused file, or None when the file is allowed."""
    found = check_source(source, str(path), extra)
    if not found:
        return None
    return found[0].detail(path, more=len(found) - 1)
