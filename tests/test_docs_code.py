"""The Python code on the documentation pages runs as pasted, or says it is an excerpt.

The convention (docs/*.md and docs/guides/*.md):

- a block fenced ```` ```python ```` is a **program**: pasted into a file, it
  runs to the end. This test runs each one in a fresh process, in an empty
  temporary directory (so ``sqlite:///x.db`` lands there), without the
  ``STARFLOW_*`` variables of the shell, with a timeout;
- a block fenced ```` ```py ```` is an **excerpt** (it needs names defined
  elsewhere on the page, or a server: Flask, PostgreSQL, Redis). It renders
  the same; the test only parses it (top-level ``await`` allowed), so a typo
  still fails;
- a ```` ```python ```` block whose body is a ``--8<-- "examples/…"`` include
  is an example, run (and its output checked) by ``tests/test_examples.py``;
  here the included file must exist.

Any other Python info string (``python3``, ``pycon``…) is refused, so a block
cannot slip out of both checks.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "guides").glob("*.md"))

_FENCE = re.compile(r"^```([\w+-]*)([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_INCLUDE = re.compile(r'^--8<-- "([^"]+)"\s*$')
_PYTHONISH = {"python3", "py3", "pycon", "pyi", "ipython", "python-repl"}


def blocks(page: Path, language: str) -> list[str]:
    """The bodies of ``page``'s blocks fenced with ``language``, in order."""
    return [m.group(3) for m in _FENCE.finditer(page.read_text()) if m.group(1) == language]


def _programs() -> list[tuple[Path, int, str]]:
    found = []
    for page in PAGES:
        for n, code in enumerate(blocks(page, "python")):
            if not _INCLUDE.match(code.strip()):
                found.append((page, n, code))
    return found


PROGRAMS = _programs()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("STARFLOW_")}


@pytest.mark.parametrize(
    ("page", "n", "code"), PROGRAMS,
    ids=[f"{p.relative_to(ROOT / 'docs')}#{n}" for p, n, _ in PROGRAMS])
def test_program_blocks_run_as_pasted(page: Path, n: int, code: str, tmp_path: Path) -> None:
    """Each ```python block runs to the end in a fresh process, in seconds."""
    script = tmp_path / "block.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=_env())
    assert proc.returncode == 0, (
        f"{page.relative_to(ROOT)} python block {n} fails as pasted (fence it ```py if it "
        f"is an excerpt):\n{code}\n{proc.stdout}{proc.stderr}")


def test_excerpts_parse() -> None:
    """Each ```py block is Python (top-level await allowed, as in an async function)."""
    problems = []
    count = 0
    for page in PAGES:
        for n, code in enumerate(blocks(page, "py")):
            count += 1
            try:
                compile(code, f"{page.name}#{n}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                        dont_inherit=True)
            except SyntaxError as exc:
                problems.append(f"{page.relative_to(ROOT)} py block {n}: {exc}")
    assert count, "no excerpt found: the fence pattern no longer matches"
    assert not problems, "\n".join(problems)


def test_includes_name_existing_examples() -> None:
    """A ```python block that includes a file includes one that exists (under examples/)."""
    for page in PAGES:
        for code in blocks(page, "python"):
            match = _INCLUDE.match(code.strip())
            if match:
                assert match.group(1).startswith("examples/"), (page, match.group(1))
                assert (ROOT / match.group(1)).is_file(), (page, match.group(1))


def test_every_python_block_is_a_program_or_an_excerpt() -> None:
    """No Python block hides under another info string; the pages hold programs at all."""
    odd = [(page.relative_to(ROOT), m.group(1)) for page in PAGES
           for m in _FENCE.finditer(page.read_text()) if m.group(1).lower() in _PYTHONISH]
    assert not odd, f"fence Python as ```python (a program) or ```py (an excerpt): {odd}"
    assert len(PROGRAMS) >= 5
