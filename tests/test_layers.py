"""Import layering of `constrain`: no import cycles, no import from a lower layer to a higher one.

Every import of a `constrain` module is read from the source with `ast` (module level and
inside functions; relative imports resolved; imports under ``if TYPE_CHECKING:`` ignored, as
they never run), so a lazy import inside a function cannot hide a dependency. Names imported
from the `constrain` facade (``from constrain import Grammar``, ``cn.generate`` after
``import constrain as cn``) resolve through its name table to the module defining them.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# The layers, lowest first: a module may import modules of its own layer or lower ones. A
# module belongs to the entry that is its longest dotted prefix. This table mirrors the layer
# diagram of docs/architecture.md; change both together.
LAYERS: list[tuple[str, ...]] = [
    # plain data and helpers that import nothing of the package
    ("constrain.errors", "constrain.datadirs", "constrain.results", "constrain.options",
     "constrain.fuel", "constrain.utf8"),
    ("constrain.engine",),
    # the grammar and example-schema libraries; the JSON Schema front end
    ("constrain.grammars", "constrain.schemas", "constrain.jsonschema"),
    ("constrain.constraints",),
    ("constrain.models",),
    ("constrain.processors",),
    ("constrain.samplers",),
    ("constrain.decoding",),
    ("constrain.api", "constrain.function", "constrain.hf"),
    ("constrain.cli", "constrain.demo", "constrain.bench", "constrain.serve", "constrain.vllm",
     "constrain.__main__"),
]
# importers exempt from the layer rule: the facade re-exports every layer lazily by name
EXEMPT_IMPORTERS = {"constrain"}

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "constrain"


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    in_function: bool = False  # runs when the function is called, not on import

    def __str__(self) -> str:
        where = " (inside a function)" if self.in_function else ""
        return f"{_where(self)}: {self.importer} imports {self.imported}{where}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# compiled modules (C++ in native/): they import nothing of the package
COMPILED = {"constrain.engine.native": ROOT / "native" / "module.cpp"}


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name), compiled ones
    included (by the file of their bindings: they import nothing of the package)."""
    return {**{_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}, **COMPILED}


MODULES = _modules()
PYTHON_MODULES = {name: path for name, path in MODULES.items() if name not in COMPILED}


def _facade_names() -> dict[str, str]:
    """The facade's public names -> the module that defines them (its `_EXPORTS` table and
    `_SUBMODULES`), read from its source."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id == "_EXPORTS":
                names.update(ast.literal_eval(node.value))
            elif isinstance(target, ast.Name) and target.id == "_SUBMODULES":
                names.update({sub: f"constrain.{sub}" for sub in ast.literal_eval(node.value)})
    assert names, "the facade's name table (_EXPORTS) was not found in constrain/__init__.py"
    return names


FACADE = _facade_names()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _existing(module: str) -> str:
    """`module`, or its longest prefix that is a module of the package (an import of a name
    that no file defines still runs its package)."""
    parts = module.split(".")
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts) if parts else module


def _facade_aliases(tree: ast.AST) -> set[str]:
    """The names ``import constrain [as cn]`` binds to the facade in a module (``import
    constrain.x`` binds ``constrain`` too), wherever the import is."""
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "constrain":
                    aliases.add(alias.asname or "constrain")
                elif alias.name.startswith("constrain.") and alias.asname is None:
                    aliases.add("constrain")
    return aliases


class _Collector(ast.NodeVisitor):
    """The `constrain` imports of one module, in `imports`: import statements, literal
    ``importlib.import_module`` calls, and ``cn.NAME`` for a facade alias `cn` (an import of
    the module defining NAME, made on first use)."""

    def __init__(self, module: str, is_package: bool, facade_aliases: set[str]):
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.facade_aliases = facade_aliases
        self.imports: list[Import] = []
        self.depth = 0  # functions entered

    def _add(self, imported: str, line: int) -> None:
        # the facade itself is no dependency (what it hands out is, resolved by name)
        if imported.startswith("constrain.") and imported != self.module:
            self.imports.append(Import(self.module, imported, line, self.depth > 0))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.visit(node.test)
            for child in node.body:
                self.visit(child)
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(_existing(alias.name), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            parts = self.package.split(".")
            base_parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        if not (base == "constrain" or base.startswith("constrain.")):
            return
        for alias in node.names:
            full = f"{base}.{alias.name}"
            if full in MODULES:
                self._add(full, node.lineno)
            elif base == "constrain" and alias.name in FACADE:
                self._add(_existing(FACADE[alias.name]), node.lineno)
            else:
                self._add(_existing(base), node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if (
            name in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            self._add(_existing(node.args[0].value), node.lineno)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        value = node.value
        if isinstance(value, ast.Name) and value.id in self.facade_aliases:
            if node.attr in FACADE:
                self._add(_existing(FACADE[node.attr]), node.lineno)
        self.generic_visit(node)


def _read_imports(source: str, module: str, is_package: bool) -> list[Import]:
    tree = ast.parse(source)
    collector = _Collector(module, is_package, _facade_aliases(tree))
    collector.visit(tree)
    return collector.imports


IMPORTS = [
    i
    for module, path in PYTHON_MODULES.items()
    for i in _read_imports(path.read_text(), module, path.name == "__init__.py")
]


def _layer(module: str) -> int | None:
    """The layer of `module`: that of its longest matching prefix (None: not in the table)."""
    best, best_len = None, -1
    for level, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = level, len(prefix)
    return best


def _where(i: Import) -> str:
    """The importer's file and line (its module name for a module that has no file)."""
    path = MODULES.get(i.importer)
    return f"{path.relative_to(ROOT) if path else i.importer}:{i.line}"


def test_the_import_reader_sees_the_kinds_of_import():
    """The reader resolves relative and facade imports, reads function bodies, and skips
    TYPE_CHECKING blocks (checked on source written here, not on the package)."""
    source = """
import typing
import constrain as cn
from constrain.engine import vocab
from ...errors import GrammarError
from ..vocab import Vocabulary
from . import bytedfa
if typing.TYPE_CHECKING:
    from constrain.api import Generator
else:
    import constrain.models
def f():
    from constrain.samplers import lcd
    return cn.generate, cn.__version__, importlib.import_module("constrain.hf")
from constrain import Grammar, grammars
"""
    found = _read_imports(source, "constrain.engine.regex.other", is_package=False)
    assert sorted((i.imported, i.line, i.in_function) for i in found) == [
        ("constrain.api", 14, True),  # cn.generate; cn.__version__ is no module's
        ("constrain.engine.regex.bytedfa", 7, False),  # `.` is constrain.engine.regex
        ("constrain.engine.vocab", 4, False),
        ("constrain.engine.vocab", 6, False),
        ("constrain.errors", 5, False),
        ("constrain.grammars", 15, False),
        ("constrain.hf", 14, True),
        ("constrain.jsonschema.grammar", 15, False),  # through the facade's name table
        ("constrain.models", 11, False),
        ("constrain.samplers.lcd", 13, True),
    ]
    assert _layer("constrain.jsonschema.__main__") == 2 and _layer("constrain.engineering") is None


def test_every_module_has_a_layer():
    unknown = sorted(m for m in MODULES if m not in EXEMPT_IMPORTERS and _layer(m) is None)
    assert not unknown, (
        f"modules with no layer: {unknown}; place each in LAYERS in tests/test_layers.py "
        f"(and in docs/architecture.md)"
    )
    targets = sorted(str(i) for i in IMPORTS if _layer(i.imported) is None)
    assert not targets, f"imports of modules with no layer: {targets}"


def _upward(imports: list[Import]) -> list[str]:
    """The imports from a lower layer to a higher one, described (the facade is exempt)."""
    upward = []
    for i in imports:
        if i.importer in EXEMPT_IMPORTERS:
            continue
        low, high = _layer(i.importer), _layer(i.imported)
        if low is not None and high is not None and high > low:
            where = " (inside a function)" if i.in_function else ""
            upward.append(
                f"{_where(i)}: {i.importer} (layer {low}) imports {i.imported} (layer {high})"
                f"{where}"
            )
    return sorted(upward)


def _cycles(imports: list[Import]) -> list[str]:
    """One shortest import cycle through each strongly connected group of modules, described
    with the import that makes each step."""
    graph: dict[str, dict[str, Import]] = {}
    for i in imports:
        graph.setdefault(i.imported, {})
        graph.setdefault(i.importer, {}).setdefault(i.imported, i)  # its first import names it
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    report = []
    for group in sorted(groups):
        members, start = set(group), group[0]
        # breadth-first from `start` back to itself inside the group: a shortest cycle
        previous: dict[str, Import] = {}
        frontier = [start]
        while frontier and start not in previous:
            reached = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in members and w not in previous:
                        previous[w] = graph[v][w]
                        reached.append(w)
            frontier = reached
        cycle, here = [], start
        while True:
            cycle.append(previous[here])
            here = previous[here].importer
            if here == start:
                break
        cycle.reverse()
        steps = [f"    {i}" for i in cycle]
        path = " -> ".join([start, *(i.imported for i in cycle)])
        report.append("\n".join([f"{path} (group of {len(group)}: {', '.join(group)})", *steps]))
    return report


def test_the_checks_report_upward_imports_and_cycles():
    """On made-up imports: an upward import is reported with both layers and its line, a
    cycle with every step; imports down the layers and the facade's are not reported."""
    imports = [
        Import("constrain.engine.matcher", "constrain.errors", 3),
        Import("constrain.engine.matcher", "constrain.api", 40),
        Import("constrain", "constrain.api", 1),
        Import("constrain.samplers.a", "constrain.samplers.b", 5),
        Import("constrain.samplers.b", "constrain.samplers.c", 6),
        Import("constrain.samplers.c", "constrain.samplers.a", 7, in_function=True),
        Import("constrain.samplers.c", "constrain.engine.vocab", 8),
    ]
    assert _upward(imports) == [
        "constrain/engine/matcher.py:40: constrain.engine.matcher (layer 1) imports "
        "constrain.api (layer 8)"
    ]
    [cycle] = _cycles(imports)
    assert cycle.splitlines()[0].startswith(
        "constrain.samplers.a -> constrain.samplers.b -> constrain.samplers.c -> "
        "constrain.samplers.a"
    )
    assert (
        "constrain.samplers.c:7: constrain.samplers.c imports constrain.samplers.a "
        "(inside a function)" in cycle
    )
    assert _cycles(imports[:4]) == []


def test_no_import_goes_up_a_layer():
    """A module imports only its own layer or lower ones (the facade is exempt)."""
    upward = _upward(IMPORTS)
    assert not upward, f"{len(upward)} imports go up a layer:\n" + "\n".join(upward)


def test_no_import_cycles():
    """No module imports itself through others, even through imports inside functions."""
    cycles = _cycles(IMPORTS)
    assert not cycles, f"{len(cycles)} import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("module", ["constrain.engine", "constrain.jsonschema"])
def test_lower_layers_load_without_torch(module):
    """The token-level automata and the JSON Schema front end load without the model stack."""
    code = (
        f"import sys, {module}\n"
        "loaded = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not loaded, loaded"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, f"import {module} failed or loaded the model stack:\n{run.stderr}"


def test_every_module_says_what_it_is_for():
    """Every module of the package opens with a docstring whose first line says what it is."""
    missing = []
    for name, path in PYTHON_MODULES.items():
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if not doc or len(doc.strip().splitlines()[0]) < 20:
            missing.append(name)
    assert not missing, f"modules without a first-line docstring: {missing}"


def test_no_private_name_is_imported_across_modules():
    """A module imports only public names of another (`from x import _y` is a hidden
    dependency on an implementation detail)."""
    private = []
    for name, path in PYTHON_MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("constrain"):
                hidden = [a.name for a in node.names if a.name.startswith("_")]
                private += [f"{name} imports {node.module}.{h}" for h in hidden]
    assert not private, private
