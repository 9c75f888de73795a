"""``starflow.continue_as_new``: a run that goes on as a new run with an empty history.

``starflow.continue_as_new(*args)`` ends the run as ``success`` with
``workflow_runs.continued_as`` naming a new run of the same workflow and
version started with ``args`` and an empty history, both written in one unit
(by the engine); ``Starflow.result`` follows the chain. For loops that would
otherwise grow one history without bound. ``Starflow.fork`` is in
:mod:`starflow.runtime.forks`.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .context import running_engine

__all__ = ["continue_as_new"]


def continue_as_new(*args: Any, **kwargs: Any) -> NoReturn:
    """End this run as completed and continue as a new run of the same workflow
    started with ``args``, with an empty history.

    Both are written in one unit: the run ends ``success`` with
    ``RunInfo.continued_as`` naming the new run, and ``Starflow.result`` of
    any run of the chain follows it to the last one's result. The new run
    runs where this one did (the caller of ``sf.run`` for an inline run,
    workers for a queued one). Nothing after this call runs. The new run
    keeps the run's deadline (it bounds the whole chain) and, in a child run,
    its parent link: the parent's await follows the chain to the last run.

    Raises:
        OutsideWorkflow: called outside a workflow function (or inside a step).
        WorkflowDefinitionError: the arguments do not fit the workflow.
        SerializationError: an argument cannot be stored as JSON.
    """
    running_engine("continue_as_new", in_step=False).continue_as_new(args, kwargs)
