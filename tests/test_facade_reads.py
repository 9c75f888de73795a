"""The CLI and the web page read through ``Starflow``'s public methods.

``starflow/cli`` and ``starflow/ui`` sit on the application object like any user
program: they reach the state adapter (``sf.adapter``) only where the job is
about the adapter itself (listed in :data:`ABOUT_THE_ADAPTER`, with why).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "starflow"

#: (file under starflow/, function) → why it touches the adapter.
ABOUT_THE_ADAPTER = {
    ("cli/admin.py", "_migrate"): "starflow migrate applies the adapter's migrations",
    ("cli/_base.py", "resolve_app"): "a new Starflow over the --app object's own adapter",
    ("ui/scopes.py", "_holds"): "probes a scope with only its adapter open (no wake key "
                                "written)",
    ("ui/scopes.py", "get"): "closes the adapter _holds opened",
}


def adapter_uses(path: Path) -> list[tuple[str, int]]:
    """Every ``<expr>.adapter`` in a module: (enclosing function, line)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Attribute) and node.attr == "adapter":
            found.append((function, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "<module>")
    return found


def test_cli_and_ui_read_through_starflow_not_its_adapter() -> None:
    stray = []
    for package in ("cli", "ui"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for function, line in adapter_uses(path):
                if (rel, function) not in ABOUT_THE_ADAPTER:
                    stray.append(f"starflow/{rel}:{line} ({function}) reaches sf.adapter: "
                                 "read through a public Starflow method (add one if none fits)")
    assert not stray, "\n".join(stray)


def test_the_check_sees_an_adapter_read(tmp_path: Path) -> None:
    module = tmp_path / "page.py"
    module.write_text("async def show(sf):\n    return await sf.adapter.list_waits('r')\n"
                      "x = lambda sf: sf.adapter\n")
    assert adapter_uses(module) == [("show", 2), ("<module>", 3)]
