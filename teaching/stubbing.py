"""The companion as one exercise sees it: its tool kit, and no implementation of what it asks.

A name list alone cannot hold: a forbidden function's private helpers keep their bodies, and
other functions compute the same (red team round 5: chapter 10's ``sampling.entropy`` answered
chapter 2's entropy exercise). So the rule is an allow-list. An answer may use torch (less what
the runner refuses: the torch names of ``not_allowed`` with their families and Python
decompositions, the aten namesakes of the answer, and ``torch.onnx`` and torch._inductor's
pattern passes in every exercise; see ``sandbox_runner.py``) and what the exercise's setup and
context cells import (:func:`exercise_rule`: the chapter's setup cell and the context cells up
to this exercise, not those of later exercises). For one exercise:

* the *tool kit* keeps its bodies: what those cells import (``from companion.x import y``, and
  ``m.y`` where they import a module ``m``), what that reaches (the definitions a kept body
  names, by name, ``module.name``, ``self.name``, ``cls.name`` or ``Class.name``; every method
  of a kept class; the class of a kept method), and what runs when the companion is imported
  (:func:`import_time_roots`: module-level calls, decorators, base classes), transitively
  (:func:`protected_set`), except what the stubbed set below holds;
* every other companion function, method and class body that returns a value is stubbed, with
  the reason "not imported by the exercise's setup or context cells" in ``STUBBED.txt`` (a
  check that only raises computes nothing: it stays, so the tool kit's checks still run).

The stubbed set, taken out of the tool kit, is the closure of:

1. the companion functions, methods and classes its ``grading.not_allowed`` names;
2. its *namesakes*: every companion definition whose name is one the answer must define (the
   exercise asks for ``attention_entropy``: ``companion.heads.attention_entropy`` goes);
3. the *private helpers* of anything already stubbed: every definition whose own name (or its
   class's) starts with ``_``, that returns a value (a check that only raises computes
   nothing), and that a stubbed body refers to, transitively; and every method of a stubbed
   class. A private helper that the tool kit needs (reached without passing through 1 or 2)
   is kept: ``tile_update`` and its ``_finite`` in the tiled exercise;
4. the *private siblings* of what 1 and 2 name, by place, not by reach: every private method
   (that returns a value) of a named method's class (``GPT._hidden`` where ``GPT.forward`` is
   named: the public ``generate`` and ``step`` then raise too); and every private function
   (that returns a value) of a named function's module, even one the tool kit reaches, unless
   a public function of that same module that the setup imports by name needs it (``_top_k``
   where ``top_k_filter`` is named goes, though ``GPT.generate`` reaches it and then raises in
   that exercise; ``_finite`` stays where ``tiled_attention`` is named: ``tile_update`` needs it).

Each stubbed function keeps its signature and loses its body, which becomes a ``raise``
(:func:`not_allowed_stub`); a stubbed class keeps its name and bases (imports, ``isinstance``
and subclasses still work) and every method it defines is stubbed. Anything that reaches a
removed body, a public caller included (``MultiHeadAttention.forward`` through
``_attention_with_weights``), then raises too. The checks do not run here: they run in the
grader's own process with the real companion (:mod:`teaching.grader`), so a check's reference
(``sinusoidal_encoding`` in chapter 6's last exercise) is whole there and stubbed here.

Known limits: a tool kit function the setup cell imports keeps its body unless the list names
it. Where it computes what an exercise asks, the list must name it, and the statement says so
(``tile_update`` in chapter 12's merge exercise, ``sinusoidal_encoding`` in chapter 6's
similarity exercise); one not found yet is usable. Within the tool kit, a private definition
goes only by place (4) or reach (3). Methods reached only through an object the code is handed
(not ``self``, not a class it names) are not seen by the reach; they are kept where their class
is imported.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass, field
from pathlib import Path

DEF = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def not_allowed_stub(dotted: str) -> ast.stmt:
    return ast.parse(f"raise RuntimeError({dotted + ' is not allowed in this exercise: write it yourself'!r})").body[0]


@dataclass
class Definition:
    key: str  # companion.flash._TiledAttention.forward
    module: str  # companion.flash
    qualname: str  # _TiledAttention.forward
    path: Path
    node: ast.AST
    cls: str | None = None  # the key of the class a method belongs to
    refs: set[str] = field(default_factory=set)  # keys of the companion definitions its body names

    @property
    def private(self) -> bool:
        return any(p.startswith("_") and not p.startswith("__") for p in self.qualname.split("."))


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class Index:
    """Every function, class and method of the companion under ``root`` and what each names."""

    def __init__(self, root: Path):
        self.root = root
        self.defs: dict[str, Definition] = {}
        self.modules: dict[str, tuple[Path, ast.Module]] = {}
        self.globals: dict[str, dict[str, str]] = {}  # module -> name -> key of a def or a module
        for path in sorted((root / "companion").rglob("*.py")):
            name = _module_name(path, root)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            self.modules[name] = (path, tree)
        for name, (path, tree) in self.modules.items():
            names = {}
            for node in tree.body:
                if isinstance(node, DEF):
                    key = f"{name}.{node.name}"
                    self.defs[key] = Definition(key, name, node.name, path, node)
                    names[node.name] = key
                    if isinstance(node, ast.ClassDef):
                        for sub in node.body:
                            if isinstance(sub, DEF):
                                k = f"{key}.{sub.name}"
                                self.defs[k] = Definition(k, name, f"{node.name}.{sub.name}", path, sub, cls=key)
            self.globals[name] = names
        for name, (path, tree) in self.modules.items():
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for node in tree.body:
                if isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        up = package.split(".")
                        up = up[: len(up) - node.level + 1]
                        base = ".".join(up + ([node.module] if node.module else []))
                    if not base.startswith("companion"):
                        continue
                    for alias in node.names:
                        self.globals[name].setdefault(alias.asname or alias.name, f"{base}.{alias.name}")
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.startswith("companion"):
                            self.globals[name].setdefault(alias.asname or alias.name.split(".")[0],
                                                          alias.name if alias.asname else "companion")
        for d in self.defs.values():
            d.refs = self._refs(d)

    def resolve(self, dotted: str, seen: frozenset = frozenset()) -> str | None:
        """The key of the definition ``dotted`` names, following re-exports; a module's name for a module."""
        if dotted in self.defs or dotted in self.modules:
            return dotted
        if dotted in seen:
            return None
        module, _, attr = dotted.rpartition(".")
        while module and module not in self.modules:
            module, _, head = module.rpartition(".")
            attr = f"{head}.{attr}"
        if not module:
            return None
        head, _, rest = attr.partition(".")
        target = self.globals[module].get(head)
        if target is None:
            return None
        return self.resolve(f"{target}.{rest}" if rest else target, seen | {dotted})

    def _class_member(self, cls_key: str, attr: str, depth: int = 0) -> str | None:
        if f"{cls_key}.{attr}" in self.defs:
            return f"{cls_key}.{attr}"
        node, module = self.defs[cls_key].node, self.defs[cls_key].module
        for base in getattr(node, "bases", ()) if depth < 10 else ():
            b = self._expr_key(base, module)
            if b in self.defs and isinstance(self.defs[b].node, ast.ClassDef):
                found = self._class_member(b, attr, depth + 1)
                if found:
                    return found
        return None

    def _expr_key(self, expr: ast.AST, module: str, cls: str | None = None) -> str | None:
        """The companion definition (or module) a ``Name`` or ``a.b.c`` expression denotes."""
        if isinstance(expr, ast.Name):
            target = self.globals[module].get(expr.id)
            return self.resolve(target) if target else None
        if isinstance(expr, ast.Attribute):
            if isinstance(expr.value, ast.Name) and expr.value.id in ("self", "cls") and cls:
                return self._class_member(cls, expr.attr)
            if isinstance(expr.value, ast.Call) and isinstance(expr.value.func, ast.Name) \
                    and expr.value.func.id == "super" and cls:
                for base in getattr(self.defs[cls].node, "bases", ()):
                    b = self._expr_key(base, module)
                    if b in self.defs:
                        found = self._class_member(b, expr.attr)
                        if found:
                            return found
                return None
            base = self._expr_key(expr.value, module, cls)
            if base is None:
                return None
            if base in self.modules:
                return self.resolve(f"{base}.{expr.attr}")
            if base in self.defs and isinstance(self.defs[base].node, ast.ClassDef):
                return self._class_member(base, expr.attr)
        return None

    def _refs(self, d: Definition) -> set[str]:
        found = set()
        cls = d.key if isinstance(d.node, ast.ClassDef) else d.cls
        if isinstance(d.node, ast.ClassDef):  # its bases, decorators and class-level code, not its methods
            roots = [*d.node.bases, *d.node.decorator_list, *(n for n in d.node.body if not isinstance(n, DEF))]
        else:
            roots = [d.node]
        for root in roots:
            for node in ast.walk(root):
                if isinstance(node, (ast.Name, ast.Attribute)):
                    key = self._expr_key(node, d.module, cls)
                    if key in self.defs and key != d.key:
                        found.add(key)
        return found


def _returns_a_value(node: ast.AST) -> bool:
    """Whether a function can hand back something (a ``return x`` or a ``yield``): a check that
    only raises computes nothing an answer could use."""
    return isinstance(node, ast.ClassDef) or any(
        isinstance(n, (ast.Yield, ast.YieldFrom)) or (isinstance(n, ast.Return) and n.value is not None)
        for n in ast.walk(node))


def imported_names(sources) -> set[str]:
    """``companion.x.y`` for every ``from companion.x import y`` and ``import companion.x`` of
    ``sources``, and ``companion.x.y.z`` for every ``m.y.z`` they write where ``m`` is a name such an
    import binds (``from companion.distributed import ring``, then ``ring.ring_step(...)``)."""
    found = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        bound = {}  # a name the source binds -> the companion name it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("companion") and not node.level:
                for a in node.names:
                    found.add(f"{node.module}.{a.name}")
                    bound[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("companion"):
                        found.add(a.name)
                        bound[a.asname or "companion"] = a.name if a.asname else "companion"
        for node in ast.walk(tree):
            chain = []
            while isinstance(node, ast.Attribute):
                chain.insert(0, node.attr)
                node = node.value
            if chain and isinstance(node, ast.Name) and node.id in bound:
                found |= {".".join([bound[node.id], *chain[:i]]) for i in range(1, len(chain) + 1)}
    return found


def import_time_roots(index: Index) -> set[str]:
    """The companion definitions that run when the companion is imported: those that module-level
    code and class bodies call, decorators, the bases of classes (``COREF_VOCAB = Vocab(_words())``,
    ``@cached_dataset``). They keep their bodies, or no exercise could import the package."""
    roots = set()

    def add(expr, module):
        if isinstance(expr, (ast.Name, ast.Attribute)):
            key = index._expr_key(expr, module)
            if key in index.defs:
                roots.add(key)

    for name, (_path, tree) in index.modules.items():
        todo = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
        while todo:
            node = todo.pop()
            if isinstance(node, DEF):
                for expr in node.decorator_list:  # called with the function
                    add(expr.func if isinstance(expr, ast.Call) else expr, name)
                exprs = list(node.decorator_list)
                if isinstance(node, ast.ClassDef):
                    for base in node.bases:
                        add(base, name)
                    exprs += node.bases
                    todo += node.body
                else:
                    exprs += [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
            else:
                exprs = [node]
            for expr in exprs:
                for sub in ast.walk(expr):
                    if isinstance(sub, ast.Call):
                        add(sub.func, name)
    return roots


def protected_set(index: Index, setup_sources, stubbed, roots=()) -> set[str]:
    """What the exercise's own setup and context cells import (and ``roots``), and everything
    that reaches without passing through a stubbed definition: it keeps its body. A class
    that is kept keeps every method that is not stubbed."""
    todo = [k for k in (index.resolve(n) for n in imported_names(setup_sources)) if k in index.defs]
    todo += list(roots)
    seen: set[str] = set()
    while todo:
        key = todo.pop()
        if key in seen or key in stubbed:
            continue
        seen.add(key)
        todo += index.defs[key].refs
        if isinstance(index.defs[key].node, ast.ClassDef):  # its methods (dunders included)
            todo += [k for k, m in index.defs.items() if m.cls == key]
        if index.defs[key].cls is not None:  # a method keeps its class (``self.x`` goes through it)
            todo.append(index.defs[key].cls)
    return seen


def exercise_rule(chapter, ex) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The arguments of :func:`prepare_course_dir` for an exercise of a chapter
    (:class:`teaching.exercises.Chapter`): its companion ``not_allowed`` names, the names its
    answer defines, and the setup and context cells that run before it in the sandbox."""
    sources = [chapter.setup_source]
    for other in chapter.exercises:
        sources += other.context
        if other is ex:
            break
    return (tuple(sorted(n for n in ex.not_allowed if n.startswith("companion."))), tuple(sorted(ex.names)),
            tuple(sources))


def stubbed_set(index: Index, not_allowed, answer_names=(), setup_sources=()) -> dict[str, str]:
    """{key of a definition to stub: why}, the closure described in the module's docstring."""
    why: dict[str, str] = {}
    for dotted in not_allowed:
        if not dotted.startswith("companion."):
            continue
        key = index.resolve(dotted)
        if key not in index.defs:
            raise ValueError(f"not_allowed names {dotted!r}, which is not a function, method or class "
                             "of the companion")
        why[key] = f"named in not_allowed as {dotted}"
    wanted = set(answer_names)
    for key, d in index.defs.items():
        if d.cls is None and not d.private and d.qualname in wanted and key not in why:
            why[key] = f"the exercise asks for {d.qualname}"
    named = set(why)
    tool_kit = protected_set(index, setup_sources, named)
    imported = {index.resolve(n) for n in imported_names(setup_sources)}
    for key in sorted(named):  # red team rounds 4 and 5: private siblings, by place, not by reach
        d = index.defs[key]
        # the module's own tool kit: what the public functions of the named function's module that
        # the setup imports by name need (``tile_update``'s ``_finite``), not what another
        # module's class reaches in for (``GPT.generate`` through ``sampling._top_k``)
        own_kit = protected_set(index, (), named, [k for k in imported if k in index.defs and k not in named
                                                   and index.defs[k].module == d.module
                                                   and index.defs[k].cls is None and not index.defs[k].private])
        for other, o in index.defs.items():
            if other in why or not o.private or not _returns_a_value(o.node):
                continue
            if d.cls is not None and o.cls == d.cls:  # a private method of a named method's class
                why[other] = f"a private method of the class of {key}"
            elif d.cls is None and o.cls is None and o.module == d.module and other not in own_kit:
                why[other] = f"a private function of the module of {key}"
    grew = True
    while grew:
        grew = False
        for key in list(why):
            d = index.defs[key]
            more = set(d.refs)
            if isinstance(d.node, ast.ClassDef):
                more |= {k for k, m in index.defs.items() if m.cls == key}
            for ref in sorted(more - set(why)):
                r = index.defs[ref]
                if r.cls == key or (r.private and _returns_a_value(r.node) and ref not in tool_kit):
                    why[ref] = f"a helper of {key}"
                    grew = True
    # red team round 5: the allow-list. Only what the setup and context cells import, and what
    # that reaches, keeps its body; everything else of the companion is stubbed.
    keep = protected_set(index, setup_sources, why, import_time_roots(index))
    for key, d in index.defs.items():  # a check that only raises computes nothing: it stays
        if key not in keep and key not in why and _returns_a_value(d.node):
            why[key] = "not imported by the exercise's setup or context cells"
    return why


def prepare_course_dir(dest: Path, not_allowed: tuple[str, ...], answer_names: tuple[str, ...] = (),
                       setup_sources: tuple[str, ...] = ()) -> Path:
    """A copy of the companion package in ``dest/companion`` in which nothing implements what
    the exercise asks (:func:`stubbed_set`): each stubbed function or method raises "not
    allowed in this exercise" and has no body left. Names outside the companion
    (``torch...``) are left to the runner (``sandbox_runner.refuse_kernels`` and its kin)."""
    import companion  # noqa: PLC0415

    src = Path(companion.__path__[0])
    if (dest / "companion").exists():
        return dest
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp / "companion", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    index = Index(tmp)
    why = stubbed_set(index, not_allowed, answer_names, setup_sources)
    by_path: dict[Path, list[str]] = {}
    for key in why:
        by_path.setdefault(index.defs[key].path, []).append(key)
    for path, keys in by_path.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for key in keys:
            d = index.defs[key]
            node = _find(tree, d.qualname)
            if isinstance(node, ast.ClassDef):
                continue  # its methods are in the set
            node.body = [not_allowed_stub(key)]
        path.write_text(ast.unparse(tree) + "\n", encoding="utf-8")
    (tmp / "STUBBED.txt").write_text("".join(f"{k}\t{why[k]}\n" for k in sorted(why)), encoding="utf-8")
    tmp.rename(dest)
    return dest


def resolve_definition(dotted: str, root: Path) -> tuple[Path, str]:
    """``companion.models.captioning.VanillaRNNCell.forward`` -> (the module's file, ``VanillaRNNCell.forward``)."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        base = root.joinpath(*parts[:i])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path, ".".join(parts[i:])
    raise ValueError(f"not_allowed names {dotted!r}, which is not in the companion")


def _find(tree: ast.Module, qualname: str):
    scope = tree.body
    node = None
    for name in qualname.split("."):
        node = next((n for n in scope if isinstance(n, DEF) and n.name == name), None)
        if node is None:
            return None
        scope = node.body
    return node
