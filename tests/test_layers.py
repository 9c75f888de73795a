"""Imports point down the layers, and no two modules import each other.

The layer order, top to bottom, is
face → runtime → admin → engine → workflow → warm → adapters → base
(DESIGN.md, docs/architecture.md). :data:`LAYERS` assigns every module of
``starflow`` to one layer; :func:`check_layers` reads every module's imports
with :mod:`ast` (module level, inside functions, under ``TYPE_CHECKING``,
relative and absolute) and reports each import that points up, each import of
``starflow_testing`` (the harness may import the product, never the reverse),
and each import cycle between modules. The test runs the checker on the real
package and on a small planted tree, so it can fail.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Top to bottom. A module may import modules of its own layer or a lower one.
ORDER = ("face", "runtime", "admin", "engine", "workflow", "warm", "adapters", "base")

#: The layer of each package of ``starflow`` (a package is one layer).
PACKAGE_LAYERS: dict[str, str] = {
    "cli": "face",
    "ui": "face",
    "runtime": "runtime",
    "admin": "admin",
    "engine": "engine",
    "workflow": "workflow",
    "warm": "warm",
    "adapters": "adapters",
    "migrations": "adapters",
}
#: The layers a top-level module of ``starflow`` may be in.
TOP_LEVEL_LAYERS = ("face", "base")

#: Every module of ``starflow`` and its layer. A new module must be added here.
LAYERS: dict[str, str] = {
    # face: what users and operators touch
    "starflow": "face",
    "starflow.__main__": "face",
    "starflow.app": "face",
    "starflow.app_bulk": "face",
    "starflow.app_runs": "face",
    "starflow.app_start": "face",
    "starflow.app_ops": "face",
    "starflow.sync": "face",
    "starflow.cli": "face",
    "starflow.cli._base": "face",
    "starflow.cli._format": "face",
    "starflow.cli.admin": "face",
    "starflow.cli.control": "face",
    "starflow.cli.copy": "face",
    "starflow.cli.outbox": "face",
    "starflow.cli.prune": "face",
    "starflow.cli.replay": "face",
    "starflow.cli.runs": "face",
    "starflow.cli.schedules": "face",
    "starflow.cli.ui": "face",
    "starflow.cli.worker": "face",
    "starflow.ui": "face",
    "starflow.ui.actions": "face",
    "starflow.ui.app": "face",
    "starflow.ui.auth": "face",
    "starflow.ui.live": "face",
    "starflow.ui.operations": "face",
    "starflow.ui.pages": "face",
    "starflow.ui.scopes": "face",
    "starflow.ui.site": "face",
    "starflow.ui.views": "face",
    # runtime: many runs (runner, workers, maintenance, schedules, forks)
    "starflow.runtime": "runtime",
    "starflow.runtime.forks": "runtime",
    "starflow.runtime.driving": "runtime",
    "starflow.runtime.jobs": "runtime",
    "starflow.runtime.maintenance": "runtime",
    "starflow.runtime.schedules": "runtime",
    "starflow.runtime.runner": "runtime",
    "starflow.runtime.waking": "runtime",
    "starflow.runtime.worker": "runtime",
    # admin: stored runs without a runtime (retention, copy, history, replayer)
    "starflow.admin": "admin",
    "starflow.admin.copy": "admin",
    "starflow.admin.copy_records": "admin",
    "starflow.admin.history": "admin",
    "starflow.admin.replayer": "admin",
    "starflow.admin.retention": "admin",
    # engine: one execution of one run (engine, journal, lease, child nodes)
    "starflow.engine": "engine",
    "starflow.engine.child_nodes": "engine",
    "starflow.engine.step_data": "engine",
    "starflow.engine.engine": "engine",
    "starflow.engine.core": "engine",
    "starflow.engine.nodes": "engine",
    "starflow.engine.execution": "engine",
    "starflow.engine.heartbeats": "engine",
    "starflow.engine.replay": "engine",
    "starflow.engine.requeue": "engine",
    "starflow.engine.writes": "engine",
    # workflow: what workflow code calls (decorators, context, waits, ...)
    "starflow.workflow": "workflow",
    "starflow.workflow.attributes": "workflow",
    "starflow.workflow.events": "workflow",
    "starflow.workflow.continuation": "workflow",
    "starflow.workflow.children": "workflow",
    "starflow.workflow.context": "workflow",
    "starflow.workflow.decorators": "workflow",
    "starflow.workflow.progress": "workflow",
    "starflow.workflow.session": "workflow",
    "starflow.workflow.threads": "workflow",
    "starflow.workflow.waits": "workflow",
    "starflow.workflow.updates": "workflow",
    "starflow.workflow.logger": "workflow",
    # warm: the warm tier and the mirror that feeds it from the cold tier
    "starflow.warm": "warm",
    "starflow.warm.base": "warm",
    "starflow.warm.drainer": "warm",
    "starflow.warm.memory": "warm",
    "starflow.warm.mirror": "warm",
    "starflow.warm.redis_tier": "warm",
    # adapters: the cold tier (the state model's port and its implementations)
    "starflow.adapters": "adapters",
    "starflow.adapters.sql": "adapters",
    "starflow.adapters.sql.adapter": "adapters",
    "starflow.adapters.sql.shared": "adapters",
    "starflow.adapters.sql.dialect": "adapters",
    "starflow.adapters._flow": "adapters",
    "starflow.adapters.sql.pools": "adapters",
    "starflow.adapters.copying": "adapters",
    "starflow.adapters.base": "adapters",
    "starflow.adapters.caller": "adapters",
    "starflow.adapters.coding": "adapters",
    "starflow.adapters.delegating": "adapters",
    "starflow.adapters.sql.pruning": "adapters",
    "starflow.adapters.sql.queries": "adapters",
    "starflow.adapters.seam": "adapters",
    "starflow.adapters.null": "adapters",
    "starflow.adapters.pages": "adapters",
    "starflow.adapters.postgres": "adapters",
    "starflow.adapters.sqlite": "adapters",
    "starflow.adapters.sweep": "adapters",
    "starflow.adapters.units": "adapters",
    "starflow.migrations": "adapters",
    # base: no starflow dependency above base
    "starflow._version": "base",
    "starflow.clock": "base",
    "starflow.codec": "base",
    "starflow.config": "base",
    "starflow.driver_errors": "base",
    "starflow.errors": "base",
    "starflow.failure": "base",
    "starflow.limits": "base",
    "starflow.logs": "base",
    "starflow.observability": "base",
    "starflow.records": "base",
    "starflow.serde": "base",
    "starflow.tokens": "base",
    "starflow.urls": "base",
}


@dataclass(frozen=True)
class Import:
    """One import statement's target as seen from the importing module."""

    source: str
    target: str
    line: int


@dataclass
class Report:
    """What :func:`check_layers` found; empty lists mean the tree is layered."""

    unknown: list[str] = field(default_factory=list)
    upward: list[str] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    cycles: list[list[str]] = field(default_factory=list)
    components: list[list[str]] = field(default_factory=list)

    def problems(self) -> list[str]:
        out = [f"{m}: not in the layer table; add it to LAYERS in tests/test_layers.py"
               for m in self.unknown]
        out += self.upward + self.forbidden
        for cycle, component in zip(self.cycles, self.components, strict=True):
            line = "import cycle: " + " -> ".join(cycle)
            if len(component) > len(cycle) - 1:
                line += f" (and more: {', '.join(component)} reach each other through imports)"
            out.append(line)
        return out


def module_name(root: Path, path: Path) -> str:
    """``root/pkg/sub/mod.py`` → ``pkg.sub.mod`` (``__init__`` names the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_imports(root: Path, package: str) -> tuple[set[str], list[Import]]:
    """Every module under ``root/package`` and every import any of them makes.

    Walks the whole syntax tree, so imports inside functions, under
    ``if TYPE_CHECKING:`` and in ``try`` blocks all count. ``from . import x``
    resolves to the submodule ``x`` when it exists, else to the package.
    """
    files = sorted((root / package).rglob("*.py"))
    modules = {module_name(root, p) for p in files}
    imports: list[Import] = []
    for path in files:
        source = module_name(root, path)
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    imports.append(Import(source, alias.name, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = source.split(".")
                    drop = node.level - 1 if is_package else node.level
                    if drop:
                        base = base[:-drop]
                    stem = ".".join([*base, node.module] if node.module else base)
                else:
                    stem = node.module or ""
                for alias in node.names:
                    sub = f"{stem}.{alias.name}"
                    target = sub if sub in modules else stem
                    imports.append(Import(source, target, node.lineno))
    return modules, imports


def owner(name: str, modules: set[str]) -> str | None:
    """The longest known module that ``name`` is or lies inside."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _ancestors(module: str) -> list[str]:
    """``a.b.c`` → ``["a.b", "a"]``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def find_cycles(graph: Mapping[str, set[str]]
                ) -> tuple[list[list[str]], list[list[str]]]:
    """The strongly connected components with more than one module (or a module
    importing itself), and for each a shortest cycle through its first module,
    as ``[a, b, …, a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan; the module graph is small
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)

    cycles = []
    for comp in components:
        members = set(comp)
        start = comp[0]
        # shortest path back to start inside the component (breadth first)
        previous: dict[str, str] = {}
        frontier = [start]
        found = start in graph.get(start, ())
        while frontier and not found:
            nxt = []
            for v in frontier:
                for w in sorted(graph.get(v, set()) & members):
                    if w == start:
                        previous[start] = v
                        found = True
                        break
                    if w not in previous:
                        previous[w] = v
                        nxt.append(w)
                if found:
                    break
            frontier = nxt
        path = [start]
        v = previous.get(start, start)
        while v != start:
            path.append(v)
            v = previous[v]
        path.append(start)
        path[1:-1] = reversed(path[1:-1])
        cycles.append(path)
    return cycles, components


def check_layers(root: Path, package: str, layers: Mapping[str, str],
                 forbidden: tuple[str, ...] = ()) -> Report:
    """Check ``root/package`` against ``layers`` (module → one of :data:`ORDER`).

    A package's ``__init__`` importing its own submodules counts like any other
    import. Imports of modules outside the package are ignored unless they lie
    under one of ``forbidden``.
    """
    modules, imports = read_imports(root, package)
    report = Report(unknown=sorted(m for m in modules if m not in layers))
    rank = {name: i for i, name in enumerate(ORDER)}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in dict.fromkeys(imports):  # ``from m import a, b`` is one import of m
        if any(imp.target == f or imp.target.startswith(f + ".") for f in forbidden):
            report.forbidden.append(
                f"{imp.source} (line {imp.line}) imports {imp.target}: nothing in "
                f"{package} may import {imp.target.split('.')[0]}")
            continue
        target = owner(imp.target, modules)
        if target is None or target == imp.source:
            continue
        # ``import pkg.sub.mod`` also runs ``pkg/sub/__init__.py``: an edge to each
        # package the target lies in, except the importer's own packages (they
        # are loaded before it) and the root package (loaded before everything).
        targets = [target] + [p for p in _ancestors(target)
                              if p in modules and p not in (package, imp.source)
                              and p not in _ancestors(imp.source)]
        for dst in targets:
            graph[imp.source].add(dst)
            src_layer, dst_layer = layers.get(imp.source), layers.get(dst)
            if src_layer is None or dst_layer is None:
                continue
            if rank[dst_layer] < rank[src_layer]:
                report.upward.append(
                    f"{imp.source} ({src_layer}, line {imp.line}) imports {dst} "
                    f"({dst_layer}): imports must point down {' → '.join(ORDER)}")
    report.cycles, report.components = find_cycles(graph)
    return report


def test_starflow_imports_point_down_and_have_no_cycles() -> None:
    """The real package: every module in the table, no upward import, no cycle,
    and no import of the test harness."""
    assert set(LAYERS.values()) <= set(ORDER)
    report = check_layers(ROOT, "starflow", LAYERS, forbidden=("starflow_testing",))
    problems = report.problems()
    assert not problems, "\n".join(problems)


def test_each_package_is_one_layer() -> None:
    """Each package of ``starflow`` is one layer (PACKAGE_LAYERS); only the face
    and the base sit at the top level."""
    wrong = []
    for module, layer in LAYERS.items():
        parts = module.split(".")
        if len(parts) > 2 or (len(parts) == 2 and parts[1] in PACKAGE_LAYERS):
            expected = PACKAGE_LAYERS[parts[1]]
        else:
            expected = layer if layer in TOP_LEVEL_LAYERS else "face or base"
        if layer != expected:
            wrong.append(f"{module}: {layer}, expected {expected}")
    assert not wrong, "\n".join(wrong)


def test_layer_table_names_only_existing_modules() -> None:
    """A module that moved or went away leaves the table too."""
    modules, _ = read_imports(ROOT, "starflow")
    stale = sorted(set(LAYERS) - modules)
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def _doc_path(module: str) -> str:
    """``starflow.cli.runs`` → ``cli/runs.py``; a package → its ``__init__.py``."""
    parts = module.split(".")[1:]
    path = ROOT / "starflow" / Path(*parts) if parts else ROOT / "starflow"
    rel = path.relative_to(ROOT / "starflow")
    return (rel / "__init__.py").as_posix() if path.is_dir() else f"{rel.as_posix()}.py"


def test_architecture_page_lists_the_layer_table() -> None:
    """docs/architecture.md's module table is this test's table: same modules,
    same layers."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    documented = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in ORDER and cells[1].startswith("`"):
            documented[cells[1].strip("`")] = cells[0]
    expected = {_doc_path(m): layer for m, layer in LAYERS.items()}
    assert documented == expected, (
        f"docs/architecture.md's table and LAYERS differ: missing "
        f"{sorted(expected.items() - documented.items())}, extra "
        f"{sorted(documented.items() - expected.items())}")


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_checker_reports_a_planted_upward_import_and_cycle(tmp_path: Path) -> None:
    """The checker is not vacuous: on a small tree it finds an upward import
    hidden in a function, one under TYPE_CHECKING, a relative one, a cycle, an
    unknown module and a forbidden import."""
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.app import App\n",
        "pkg/app.py": "from pkg import core\nclass App: ...\n",
        "pkg/core.py": (
            "from typing import TYPE_CHECKING\n"
            "from . import util\n"
            "if TYPE_CHECKING:\n"
            "    from pkg.app import App\n"  # upward, type-only
        ),
        "pkg/util.py": (
            "def f():\n"
            "    from .core import util\n"  # same layer, but closes core -> util -> core
            "    import harness.tools\n"  # forbidden
        ),
        "pkg/store/__init__.py": "",
        "pkg/store/db.py": "def g():\n    from ..app import App\n",  # upward, relative
        "pkg/stray.py": "",
    })
    layers = {"pkg": "face", "pkg.app": "face", "pkg.core": "runtime", "pkg.util": "runtime",
              "pkg.store": "adapters", "pkg.store.db": "adapters"}
    report = check_layers(tmp_path, "pkg", layers, forbidden=("harness",))
    assert report.unknown == ["pkg.stray"]
    assert any(p.startswith("pkg.core (runtime, line 4) imports pkg.app (face)")
               for p in report.upward), report.upward
    assert any(p.startswith("pkg.store.db (adapters, line 2) imports pkg.app (face)")
               for p in report.upward), report.upward
    assert len(report.upward) == 2
    assert report.forbidden and "pkg.util (line 3) imports harness.tools" in report.forbidden[0]
    # app -> core -> app (type-only) and core -> util -> core form one component;
    # the report names a shortest path through it from its first module
    assert report.cycles == [["pkg.app", "pkg.core", "pkg.app"]]
    problems = report.problems()
    assert any("add it to LAYERS" in p for p in problems)
    assert any(p.startswith("import cycle: ") for p in problems)


def test_checker_sees_a_cycle_through_a_package_init(tmp_path: Path) -> None:
    """``import pkg.store.db`` runs ``pkg/store/__init__.py``: a cycle through it
    counts even though no module names the package."""
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/core.py": "import pkg.store.db\n",
        "pkg/store/__init__.py": "from pkg.core import run\n",
        "pkg/store/db.py": "",
    })
    layers = {"pkg": "face", "pkg.core": "runtime", "pkg.store": "runtime",
              "pkg.store.db": "runtime"}
    report = check_layers(tmp_path, "pkg", layers)
    assert report.cycles == [["pkg.core", "pkg.store", "pkg.core"]]
    assert report.upward == []


def test_checker_passes_a_layered_tree(tmp_path: Path) -> None:
    """And on a clean tree it reports nothing."""
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.app import App\n",
        "pkg/app.py": "from pkg.core import run\nclass App: ...\n",
        "pkg/core.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                       "    from pkg import util\ndef run():\n    from .util import x\n",
        "pkg/util.py": "x = 1\n",
    })
    layers = {"pkg": "face", "pkg.app": "face", "pkg.core": "runtime", "pkg.util": "base"}
    assert check_layers(tmp_path, "pkg", layers).problems() == []
