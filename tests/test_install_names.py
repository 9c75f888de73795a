"""Every install instruction names the distribution on PyPI and an extra that exists.

The import name is ``starflow`` but the distribution is ``starflow-durable``
(``pyproject.toml``): ``pip install 'starflow[schedules]'`` installs an
unrelated project or fails. The test reads every ``pip install`` in the
documentation, the README, the examples and the package's own messages.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DISTRIBUTION = PYPROJECT["project"]["name"]
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]

#: Where users read install instructions (error messages are in starflow/).
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
           *sorted((ROOT / "examples").rglob("*.py")), *sorted((ROOT / "starflow").rglob("*.py"))]

_INSTALL = re.compile(r"pip install([^`\"\n)]*)")
_TOKEN = re.compile(r"'([^']*)'|(\S+)")
_REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]*)(?:\[([^\]]*)\])?$")


def _third_party() -> set[str]:
    """Packages some extra requires: a line may name them (``fastapi httpx``)."""
    names = set()
    for requirements in EXTRAS.values():
        for req in requirements:
            match = re.match(r"[A-Za-z0-9_.-]+", req)
            assert match is not None
            names.add(match.group(0).lower())
    return names


def check_install_line(args: str) -> list[str]:
    """What is wrong with the arguments of one ``pip install`` (empty: nothing)."""
    problems: list[str] = []
    third_party = _third_party()
    args = re.split(r"\s(?:#|&&|;|\|\|)", " " + args)[0]  # a comment or the next command
    for quoted, bare in _TOKEN.findall(args):
        token = (quoted or bare).rstrip(".,;:")
        if not token or token.startswith("-"):
            continue
        match = _REQUIREMENT.match(token)
        if match is None:
            problems.append(f"cannot read requirement {token!r}")
            continue
        name, extras = match.group(1), match.group(2)
        if name in ("", ".") or name == DISTRIBUTION:
            for extra in (e.strip() for e in (extras or "").split(",") if e.strip()):
                if extra not in EXTRAS:
                    problems.append(f"{token!r}: no extra {extra!r} in pyproject.toml "
                                    f"(extras: {', '.join(sorted(EXTRAS))})")
        elif name.lower().startswith("starflow"):
            problems.append(f"{token!r}: the distribution is {DISTRIBUTION!r}, not {name!r}")
        elif name.lower() not in third_party:
            problems.append(f"{token!r}: not a requirement of any extra in pyproject.toml")
    return problems


def test_every_install_line_names_the_distribution_and_an_existing_extra() -> None:
    """Each pip install in docs, README, examples and messages installs what exists."""
    problems = []
    lines = 0
    for path in SOURCES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in _INSTALL.finditer(line):
                lines += 1
                problems += [f"{path.relative_to(ROOT)}:{number}: {p}"
                             for p in check_install_line(match.group(1))]
            if re.search(r"(?<![\w-])starflow\[", line):
                problems.append(f"{path.relative_to(ROOT)}:{number}: 'starflow[...]' is not "
                                f"installable: the distribution is {DISTRIBUTION!r}")
    assert lines >= 10, f"found only {lines} install lines: the pattern no longer matches"
    assert not problems, "\n".join(problems)


def test_the_checker_catches_a_wrong_name_and_a_missing_extra() -> None:
    """The checker itself rejects the import name and an unknown extra."""
    assert check_install_line(f" '{DISTRIBUTION}[ui]'") == []
    assert check_install_line(" -e '.[dev]'") == []
    assert check_install_line(" fastapi httpx") == []
    assert check_install_line(" 'starflow[schedules]'")
    assert check_install_line(f" '{DISTRIBUTION}[nope]'")
    assert check_install_line(" some-unlisted-package")
