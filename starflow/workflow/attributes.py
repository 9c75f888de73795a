"""Searchable run attributes: ``starflow.set_attributes(customer="c-42")``.

Workflow code names what a run is about; ``Starflow.list_runs(attributes=...)``
(and ``starflow runs list --attr key=value``) finds runs by it through an index
(``workflow_run_attributes``, migration 031). The call is recorded as a node
``attributes#n`` and written with the run's next boundary (its next step,
wait or end), in the same transaction: a replay finds it recorded and writes
nothing. Like ``patched()`` markers, attribute nodes never count as
divergence: adding or removing a ``set_attributes`` call is safe for runs in
flight (a replay that meets a new call in the middle of its history skips it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import serde
from ..errors import InvalidArgument
from ..limits import name_problem
from .context import running_engine

__all__ = ["ATTRIBUTES_KIND", "MAX_ATTRIBUTE_LENGTH", "encode_attributes", "set_attributes"]

#: The node kind of a ``set_attributes`` call (``attributes#1``).
ATTRIBUTES_KIND = "attributes"
#: Characters of an attribute's key, and of its value's JSON text (both indexed).
MAX_ATTRIBUTE_LENGTH = 200


def encode_attributes(attributes: Mapping[str, Any], *, what: str = "set_attributes",
                      run_id: str | None = None) -> dict[str, str]:
    """Each attribute's value as its JSON text, after checking keys and values.

    Values may be ``str``, ``int`` or ``bool`` (an exact-match lookup key);
    keys and the JSON text are at most :data:`MAX_ATTRIBUTE_LENGTH` characters.

    Raises:
        InvalidArgument: an empty mapping, a bad key or an unsupported value.
    """
    if not attributes:
        raise InvalidArgument(f"{what} needs at least one attribute", run_id=run_id)
    encoded: dict[str, str] = {}
    problems: list[str] = []
    for key, value in attributes.items():
        problem = name_problem("attribute name", key, max_length=MAX_ATTRIBUTE_LENGTH)
        if problem is None and (value is None or not isinstance(value, str | int | bool)
                                or isinstance(value, float)):
            problem = (f"attribute {key!r} must be a str, int or bool (an exact-match "
                       f"key), not {type(value).__name__}")
        if problem is None:
            text = serde.encode(value).decode()
            problem = name_problem(f"attribute {key!r} value (as JSON)", text,
                                   max_length=MAX_ATTRIBUTE_LENGTH)
            encoded[key] = text
        if problem is not None:
            problems.append(problem)
    if problems:
        raise InvalidArgument(f"{what}: " + "; ".join(problems), run_id=run_id)
    return encoded


def set_attributes(**attributes: str | int | bool) -> None:
    """Record searchable attributes of this run: ``set_attributes(customer="c-42")``.

    Find runs by them with ``Starflow.list_runs(attributes={"customer": "c-42"})``.
    A later call with the same key replaces its value. Written with the run's
    next boundary (step, wait or end); recorded, so a replay writes nothing.

    Raises:
        InvalidArgument: no attribute, a bad name, or a value that is not a
            str, int or bool (at most 200 characters as JSON).
        StarflowError: outside a workflow run, or inside a step.
    """
    engine = running_engine("set_attributes")
    encoded = encode_attributes(attributes, run_id=engine.run_id)
    engine.set_attributes(encoded)
