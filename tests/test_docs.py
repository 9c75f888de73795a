"""The documentation site builds strictly and stays true to the code."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict` passes: nav pages exist, links resolve, API pages render."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec(
            "mkdocstrings") is None:
        pytest.skip("mkdocs / mkdocstrings not installed: pip install -e '.[dev]'")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "index.html").exists()
    assert (tmp_path / "reference" / "starflow" / "index.html").exists()


def test_errors_page_covers_every_error() -> None:
    """docs/errors.md has a section and a tree line for every exported error."""
    from starflow import errors

    text = (DOCS / "errors.md").read_text()
    headings = set(re.findall(r"^## (\w+)$", text, flags=re.MULTILINE))
    for name in errors.__all__:
        assert name in headings, f"docs/errors.md has no section for {name}"
        if name != "StarflowError":
            assert re.search(rf"[├└]── {name}\b", text), f"{name} missing from the tree"


def test_architecture_page_names_every_module() -> None:
    """docs/architecture.md mentions every module of the package."""
    text = (DOCS / "architecture.md").read_text()
    package = ROOT / "starflow"
    names = {p.name for p in package.glob("*.py") if p.name not in ("__init__.py",
                                                                    "__main__.py")}
    names |= {f"{p.name}/" for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"}
    missing = sorted(n for n in names if n not in text)
    assert not missing, f"docs/architecture.md does not mention {missing}"


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), flags=re.MULTILINE | re.DOTALL)


@pytest.mark.slow
def test_readme_code_runs(tmp_path: Path) -> None:
    """Every Python block of README.md runs to the end in a fresh process, in seconds."""
    blocks = _python_blocks(ROOT / "README.md")
    assert blocks, "README.md has no python block"
    env = {k: v for k, v in os.environ.items()
           if k not in ("STARFLOW_URL", "STARFLOW_DATABASE_URL", "STARFLOW_WORKSPACE",
                        "STARFLOW_ENV")}
    for n, code in enumerate(blocks):
        script = tmp_path / f"readme_{n}.py"
        script.write_text(code)
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env=env)
        assert proc.returncode == 0, f"README block {n}:\n{code}\n{proc.stdout}{proc.stderr}"


def test_reference_covers_all_exports() -> None:
    """docs/reference/starflow.md documents every name in starflow.__all__."""
    import starflow

    text = (DOCS / "reference" / "starflow.md").read_text()
    documented = set(re.findall(r"^::: starflow\.(\w+)\s*$", text, flags=re.MULTILINE))
    # A name documented where it is defined (``::: starflow.mod.name``, for a
    # public name that a module of the same name shadows for mkdocstrings)
    # counts if it is the very object ``starflow`` exports.
    for path in re.findall(r"^::: (starflow\.[\w.]+\.\w+)\s*$", text, flags=re.MULTILINE):
        module, name = path.rsplit(".", 1)
        try:
            obj = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        if getattr(starflow, name, None) is obj:
            documented.add(name)
    if "::: starflow.errors" in text:
        documented |= set(starflow.errors.__all__)
    missing = sorted(set(starflow.__all__) - documented - {"__version__"})
    assert not missing, f"docs/reference/starflow.md does not document {missing}"
