"""Which loads of a refused builtin's name are the file's own name, not the builtin (issue 31 §0).

The static policy refuses `input`, `open`, `vars`, `compile`, ... because the
builtins behind those names read stdin, open files or run code. But
`input` is also the standard tensor argument of the whole torch API
(`def forward(self, input)`, `input = input.contiguous()`), and a name the
file binds itself is not the builtin. This module answers, for each load of
such a name, "can this load reach the builtin?" under Python's own scoping,
and says "no" only when it is sure:

- a function's (or lambda's, or comprehension's) own name: a parameter of
  any kind, any assignment target (plain, augmented, annotated, unpacked,
  walrus), a loop or with-as or except-as target, an import, a def or
  class, a match capture, `del`: a load in that function never falls back
  to the builtins (it raises UnboundLocalError instead), nor does a load in
  a function nested in it (a closure) or a name declared `nonlocal`;
- decorators, default values, annotations and class bases are evaluated in
  the enclosing scope, and so is a comprehension's first iterable, so a
  name there is looked up outside (`def f(open=open)` reaches the builtin);
- a class body's names are not visible in its methods;
- module and class bodies look names up at run time (a name bound later, or
  only on one branch, or deleted, falls back to the builtin). There a
  binding counts only when it is an unconditional statement of that body
  (assignment, annotated assignment with a value, def, class, import), no
  statement of that namespace deletes the name (`del`, `except ... as`), and
  the load runs after it: a later statement of the same body, or a function
  body, which can run only once a call does, provided nothing before the
  binding can call anything (imports, undecorated defs, docstrings and
  call-free assignments only). `global NAME` in a function defers to these
  module-level rules.

Everything not proven bound is left to the policy to refuse.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

_FUNCTION = "function"
_COMPREHENSION = "comprehension"
_CLASS = "class"
_MODULE = "module"
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass
class _Scope:
    kind: str
    parent: _Scope | None
    bound: set[str] = field(default_factory=set)  # every name bound anywhere in the scope
    declared_global: set[str] = field(default_factory=set)
    declared_nonlocal: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)  # del / except-as targets (namespaces only matter)
    first_binding: dict[str, int] = field(default_factory=dict)  # namespaces: name -> first unconditional stmt

    def runs_deferred(self) -> bool:
        """Does code in this scope run only when something calls a function (not as its module runs)?"""
        scope: _Scope | None = self
        while scope is not None:
            if scope.kind == _FUNCTION:
                return True
            scope = scope.parent
        return False


@dataclass
class _Load:
    node: ast.Name
    scope: _Scope
    top_index: int  # index of the module statement the load is in
    body_index: int  # index of the statement in the innermost class body (class scopes only)


class _Collector:
    """One walk that records every scope's bindings and every load of the names asked about."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.loads: list[_Load] = []
        self.module = _Scope(_MODULE, None)
        self.top_index = 0
        self.body_index = 0

    # -- bindings --------------------------------------------------------------
    @staticmethod
    def _bind(scope: _Scope, name: str) -> None:
        scope.bound.add(name)

    @staticmethod
    def _owner(scope: _Scope) -> _Scope:
        """Where a walrus in a comprehension binds: the nearest scope that is not a comprehension."""
        while scope.kind == _COMPREHENSION and scope.parent is not None:
            scope = scope.parent
        return scope

    def _record_namespace_statement(self, scope: _Scope, stmt: ast.stmt, index: int) -> None:
        """Unconditional bindings made by one direct statement of a module or class body."""
        names: list[str] = []
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                names.extend(_plain_target_names(target))
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None and isinstance(stmt.target, ast.Name):
            names.append(stmt.target.id)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names.extend((a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*")
        for name in names:
            scope.first_binding.setdefault(name, index)

    # -- walk ------------------------------------------------------------------
    def run(self, tree: ast.Module) -> None:
        for index, stmt in enumerate(tree.body):
            self.top_index = index
            self._record_namespace_statement(self.module, stmt, index)
            self.visit(stmt, self.module)

    def visit_body(self, body: list[ast.stmt], scope: _Scope) -> None:
        for stmt in body:
            self.visit(stmt, scope)

    def visit(self, node: ast.AST, scope: _Scope) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            self._function(node, scope)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            self._bind(self._owner(scope), node.target.id)  # a walrus binds outside its comprehensions
            self.visit(node.value, scope)
        elif isinstance(node, ast.ClassDef):
            self._class(node, scope)
        elif isinstance(node, _COMPREHENSIONS):
            self._comprehension(node, scope)
        else:
            self._plain(node, scope)
            for child in ast.iter_child_nodes(node):
                self.visit(child, scope)

    def _plain(self, node: ast.AST, scope: _Scope) -> None:
        """Bindings and loads a node makes in the scope it is evaluated in."""
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                if node.id in self.names:
                    self.loads.append(_Load(node, scope, self.top_index, self.body_index))
            else:
                self._bind(scope, node.id)
                if isinstance(node.ctx, ast.Del):
                    scope.deleted.add(node.id)
        elif isinstance(node, ast.alias):
            if node.name != "*":
                self._bind(scope, (node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self._bind(scope, node.name)
            scope.deleted.add(node.name)  # the name is deleted when the handler ends
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            self._bind(scope, node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            self._bind(scope, node.rest)
        elif isinstance(node, ast.Global):
            scope.declared_global.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.declared_nonlocal.update(node.names)

    def _enclosing_parts(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, scope: _Scope) -> None:
        """Decorators, defaults and annotations: evaluated where the def or lambda stands."""
        args = node.args
        parts: list[ast.AST | None] = [*args.defaults, *args.kw_defaults]
        if not isinstance(node, ast.Lambda):
            parts += node.decorator_list
            parts.append(node.returns)
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            parts += [a.annotation for a in every if a is not None]
        for part in parts:
            if part is not None:
                self.visit(part, scope)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, scope: _Scope) -> None:
        if not isinstance(node, ast.Lambda):
            self._bind(scope, node.name)
        self._enclosing_parts(node, scope)
        inner = _Scope(_FUNCTION, scope)
        args = node.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None:
                self._bind(inner, a.arg)
        if isinstance(node, ast.Lambda):
            self.visit(node.body, inner)
        else:
            self.visit_body(node.body, inner)

    def _class(self, node: ast.ClassDef, scope: _Scope) -> None:
        self._bind(scope, node.name)
        for part in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(part, scope)
        inner = _Scope(_CLASS, scope)
        outer_index = self.body_index
        for index, stmt in enumerate(node.body):
            self.body_index = index
            self._record_namespace_statement(inner, stmt, index)
            self.visit(stmt, inner)
        self.body_index = outer_index

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp,
                       scope: _Scope) -> None:
        first = node.generators[0]
        self.visit(first.iter, scope)  # the outermost iterable is evaluated outside
        inner = _Scope(_COMPREHENSION, scope)
        for gen in node.generators:
            self.visit(gen.target, inner)
            if gen is not first:
                self.visit(gen.iter, inner)
            for cond in gen.ifs:
                self.visit(cond, inner)
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        for part in parts:
            self.visit(part, inner)


def _plain_target_names(target: ast.AST) -> list[str]:
    """Names an assignment target binds directly (`a`, `a, b`, `[a, *b]`), not attributes or subscripts."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _plain_target_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _plain_target_names(elt)]
    return []


def _is_inert(stmt: ast.stmt) -> bool:
    """Can running this module statement not call anything (so no function body of the file can run)?"""
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)):
        return True
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if stmt.decorator_list:
            return False
        args = stmt.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        evaluated = [*args.defaults, *args.kw_defaults, stmt.returns, *(a.annotation for a in every if a)]
        return all(_call_free(part) for part in evaluated if part is not None)
    if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)):
        return _call_free(stmt)
    return False


def _call_free(node: ast.AST) -> bool:
    return not any(isinstance(n, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)) for n in ast.walk(node))


class _Resolver:
    def __init__(self, tree: ast.Module, module: _Scope) -> None:
        self.module = module
        self.inert_until = 0  # module statements [0, inert_until) cannot call anything
        for stmt in tree.body:
            if not _is_inert(stmt):
                break
            self.inert_until += 1
        self.deleted = module.deleted | _deleted_through_global(tree)

    def own(self, load: _Load) -> bool:
        """Is this load surely the file's own name (never the builtin)?"""
        name, scope = load.node.id, load.scope
        if name in scope.declared_global:
            return self._global(name, load, deferred=scope.runs_deferred())
        if scope.kind in (_FUNCTION, _COMPREHENSION):
            if name in scope.bound and name not in scope.declared_nonlocal:
                return True
            return self._free(name, scope.parent, load)
        if scope.kind == _CLASS:
            first = scope.first_binding.get(name)
            if first is not None and first < load.body_index and name not in scope.deleted:
                return True
            return self._free(name, scope.parent, load)
        return self._global(name, load, deferred=False)

    def _free(self, name: str, scope: _Scope | None, load: _Load) -> bool:
        """A name not bound where it is loaded: the enclosing functions (class bodies skipped), then globals.
        A `nonlocal` that names no enclosing binding is a SyntaxError; it is looked up outward all the same."""
        while scope is not None and scope.kind != _MODULE:
            if scope.kind in (_FUNCTION, _COMPREHENSION):
                if name in scope.declared_global:
                    break
                if name in scope.bound and name not in scope.declared_nonlocal:
                    return True
            scope = scope.parent
        return self._global(name, load, deferred=load.scope.runs_deferred())

    def _global(self, name: str, load: _Load, deferred: bool) -> bool:
        first = self.module.first_binding.get(name)
        if first is None or name in self.deleted:
            return False
        if deferred:  # a function body runs once something calls it: never before an inert prefix ends
            return first < self.inert_until
        return first < load.top_index


def _deleted_through_global(tree: ast.Module) -> set[str]:
    """Names a function or class declares `global` and deletes (`del`, `except ... as`): the module's binding
    may go. Over-approximated: a `global` anywhere inside a def counts for the whole def."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        declared = {n for sub in ast.walk(node) if isinstance(sub, ast.Global) for n in sub.names}
        for sub in ast.walk(node) if declared else ():
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Del) and sub.id in declared:
                out.add(sub.id)
            elif isinstance(sub, ast.ExceptHandler) and sub.name in declared:
                out.add(sub.name)
    return out


def own_name_loads(tree: ast.Module, names: frozenset[str]) -> set[int]:
    """`id()` of every Name node loading one of `names` that surely refers to a binding the file made, never to
    the builtin of that name (see the module docstring for the rules)."""
    collector = _Collector(names)
    collector.run(tree)
    resolver = _Resolver(tree, collector.module)
    return {id(load.node) for load in collector.loads if resolver.own(load)}
