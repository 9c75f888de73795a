"""Child workflows (#17): ``start_child``, ``ChildHandle`` and their nodes.

Inside a workflow, ``await other_wf(x)`` (a ``@workflow`` function) or
``handle = await starflow.start_child(other_wf, x)`` starts a **child run**:
a queued run whose ``parent_run_id`` names the parent. Two nodes record it in
the parent's history:

- ``child:<workflow>#n``: the start. The child's row and this node's
  ``node_complete`` (output ``{"run_id": …}``) are written in one unit, under
  the parent's lease; the child's id is derived from the parent's run id and
  this node id, so a replay (after a crash anywhere around that unit) finds
  the same child and never starts a second one.
- ``result:<child run id>#n``: ``await handle.result()``. If the child has
  ended, its outcome is recorded at once; otherwise the parent pauses durably
  on the wait event ``__starflow.child:<child run id>`` and the child's end
  wakes it (:meth:`starflow.runtime.waking.Waker.wake_parent`) with the outcome read
  from the child's row. Replay returns the recorded outcome: a value, or
  :class:`~starflow.WorkflowFailed` for a failed child,
  :class:`~starflow.RunCancelled` for a cancelled one.

This module is what workflow code calls; the engine writes the two nodes (and
the runtime reads their ids and outcomes) in :mod:`starflow.engine.child_nodes`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Generic, ParamSpec, TypeVar, overload

from ..errors import InvalidArgument
from ..limits import check_name
from .context import running_engine
from .decorators import WorkflowDefinition, definition_of, timeout_problem
from .threads import threadable

__all__ = ["ChildHandle", "start_child"]

R = TypeVar("R")
P = ParamSpec("P")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")


class ChildHandle(Generic[R]):
    """A child run started by :func:`start_child`; ``await handle.result()`` waits for it.

    Attributes:
        run_id: The child run's id (``sf.get_run(run_id)`` and the CLI show it).
        workflow: The child's workflow name.
    """

    def __init__(self, run_id: str, definition: WorkflowDefinition) -> None:
        self.run_id = run_id
        self.workflow = definition.name
        self._definition = definition

    def __repr__(self) -> str:
        return f"ChildHandle(run_id={self.run_id!r}, workflow={self.workflow!r})"

    @threadable
    async def result(self) -> R:
        """Wait durably for the child to end and return its result.

        The parent pauses like at any wait (no process holds it) and the
        child's end wakes it; the outcome is recorded in the parent's history.
        Several ``result()`` calls may be gathered (``asyncio.gather``).

        Raises:
            WorkflowFailed: the child ended in ``error`` (its cause attached:
                ``error_type``, ``error_message``, ``node_id``…).
            RunCancelled: the child was cancelled.
            StarflowError: called outside the workflow that started the child.
        """
        engine = running_engine("ChildHandle.result")
        value: R = await engine.child_result(self.run_id, self._definition.return_type)
        return value


# Typed like ``await child_wf(x)``: the first overload checks a call's arguments
# against the workflow's signature (ParamSpec). A ParamSpec cannot carry keyword
# options besides the workflow's own (PEP 612), so a call with ``run_id=``,
# ``pool=`` or ``detached=`` is checked by the overload of its number of
# positional arguments (as Temporal's start_child_workflow is), up to four.
@overload
async def start_child(wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
                      ) -> ChildHandle[R]: ...


@overload
async def start_child(wf: Callable[[], Awaitable[R]], /, *, run_id: str | None = None,
                      pool: str | None = None, detached: bool = False,
                      timeout: timedelta | None = None) -> ChildHandle[R]: ...


@overload
async def start_child(wf: Callable[[A1], Awaitable[R]], a1: A1, /, *,
                      run_id: str | None = None, pool: str | None = None,
                      detached: bool = False, timeout: timedelta | None = None
                      ) -> ChildHandle[R]: ...


@overload
async def start_child(wf: Callable[[A1, A2], Awaitable[R]], a1: A1, a2: A2, /, *,
                      run_id: str | None = None, pool: str | None = None,
                      detached: bool = False, timeout: timedelta | None = None
                      ) -> ChildHandle[R]: ...


@overload
async def start_child(wf: Callable[[A1, A2, A3], Awaitable[R]], a1: A1, a2: A2, a3: A3, /, *,
                      run_id: str | None = None, pool: str | None = None,
                      detached: bool = False, timeout: timedelta | None = None
                      ) -> ChildHandle[R]: ...


@overload
async def start_child(wf: Callable[[A1, A2, A3, A4], Awaitable[R]], a1: A1, a2: A2, a3: A3,
                      a4: A4, /, *, run_id: str | None = None, pool: str | None = None,
                      detached: bool = False, timeout: timedelta | None = None
                      ) -> ChildHandle[R]: ...


@threadable
async def start_child(wf: Callable[..., Awaitable[Any]], /, *args: Any,
                      **kwargs: Any) -> ChildHandle[Any]:
    """Start a child run of workflow ``wf`` from inside a workflow; wait for it later.

    ::

        handles = [await starflow.start_child(resize, image) for image in images]
        sizes = await asyncio.gather(*(h.result() for h in handles))

    The child is a queued run (claimed by the workers of ``pool``) whose
    ``parent_run_id`` is this run. Recorded as node ``child:<workflow>#n``: a
    replay returns the same handle without starting another child. Cancelling
    the parent cancels its attached children (and theirs); a ``detached`` child
    lives on. ``await child_wf(*args)`` is ``start_child`` followed by
    ``result()``.

    Args:
        wf: A ``@workflow`` function.
        args: Its arguments (and ``kwargs``, except the options below).
        kwargs: Its keyword arguments, and these options:

    Keyword Args:
        run_id (str | None): The child's run id (a UUID) or run key (any other
            string, such as ``"invoice-42"``: the child's id is derived from it
            and ``RunInfo.run_key`` keeps it, as for ``sf.options(run_id=)``);
            by default derived from this run's id and the node, the same on
            every replay.
        pool (str | None): The runner pool whose workers run the child (default: the
            child workflow's ``pool``, else any).
        detached (bool): Not cancelled with the parent (still listed as its child).
        timeout (timedelta | None): The child's deadline, from its start
            (overrides the child workflow's ``@workflow(timeout=)``, as
            ``sf.options(timeout=)`` does for a run): past it the child ends in
            ``error`` with ``WorkflowTimeout``, queued or running, and
            ``handle.result()`` raises :class:`~starflow.WorkflowFailed`
            (``error_type == "WorkflowTimeout"``) as for any failed child.

    Raises:
        StarflowError: called outside a workflow run, or inside a step.
        WorkflowDefinitionError: ``wf`` is not a workflow, or the arguments do
            not fit its signature.
        InvalidArgument: a bad ``run_id``, ``pool``, ``detached`` or ``timeout``.
        RunIdConflict: ``run_id`` names a run of another workflow.

    Nothing is written when one of these is raised.

    Type checkers check the arguments against ``wf``'s signature, and type
    ``handle.result()`` as ``wf``'s return type. With ``run_id=``, ``pool=``,
    ``detached=`` or ``timeout=``, pass the workflow's arguments positionally (up to four are
    checked; more, or keyword arguments besides these options, are accepted
    at run time only).
    """
    engine = running_engine("start_child")
    definition = definition_of(wf)
    # The options are keyword arguments besides the workflow's (see the overloads).
    run_id: Any = kwargs.pop("run_id", None)
    pool: Any = kwargs.pop("pool", None)
    detached: Any = kwargs.pop("detached", False)
    timeout: Any = kwargs.pop("timeout", None)
    problems = []
    if (problem := timeout_problem("timeout", timeout)) is not None:
        problems.append(problem)
    if run_id is not None:
        try:  # a UUID, or a run key (the engine derives the child's id from it)
            engine.adapter.run_ref(run_id)
        except InvalidArgument as exc:
            problems.append(str(exc))
    if pool is not None and (not isinstance(pool, str) or not pool.strip()):
        problems.append(f"pool must be a non-empty string: {pool!r}")
    if not isinstance(detached, bool):
        problems.append(f"detached must be a bool: {detached!r}")
    if problems:
        raise InvalidArgument("start_child: " + "; ".join(problems), run_id=engine.run_id)
    check_name("pool", pool, optional=True, run_id=engine.run_id)
    child_id: str = await engine.start_child(definition, args, kwargs, run_id=run_id,
                                             pool=pool, detached=detached, timeout=timeout)
    return ChildHandle(child_id, definition)

