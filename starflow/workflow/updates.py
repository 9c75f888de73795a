"""Updates: a request to a running workflow that gets the workflow's answer.

The caller (``Starflow.update``) queues the request in the run's inbox under
the reserved event ``__starflow.update:<name>``, together with a marker
``__starflow.update-id:<update_id>`` in the same unit, guarded so that at most
one request per ``update_id`` is ever queued (the guard locks the run row):
a retried or concurrent call with the same id waits for the same answer,
never a second execution. The workflow receives it with :func:`receive`, a
durable wait recorded as ``receive:<name>#n``, and answers with
:meth:`UpdateRequest.reply` or :meth:`UpdateRequest.reject`, recorded as a
``reply:<name>#n`` node whose output carries the ``update_id``; the caller
reads the answer from the run's history.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Generic, TypeVar, overload

from .. import serde
from ..errors import InvalidArgument, SerializationError, StarflowError
from ..limits import check_name
from .context import check_event, running_engine

__all__ = [
    "UPDATE_MARKER_PREFIX",
    "UPDATE_PREFIX",
    "UpdateRequest",
    "receive",
    "update_event",
    "update_marker",
]

T = TypeVar("T")

#: The inbox event of an update request named ``<name>``.
UPDATE_PREFIX = "__starflow.update:"
#: The inbox marker that an update id was queued once.
UPDATE_MARKER_PREFIX = "__starflow.update-id:"


def update_event(name: str) -> str:
    return UPDATE_PREFIX + name


def update_marker(update_id: str) -> str:
    return UPDATE_MARKER_PREFIX + update_id


def check_update_id(update_id: object, *, run_id: str | None = None) -> str:
    if not isinstance(update_id, str) or not update_id:
        raise InvalidArgument(f"update_id must be a non-empty string: {update_id!r}",
                              run_id=run_id)
    check_name("update_id", update_id, run_id=run_id)
    return update_id


class UpdateRequest(Generic[T]):
    """An update received by the workflow: answer it once, with :meth:`reply` or
    :meth:`reject`.

    Attributes:
        name: The update's name (``Starflow.update(run_id, name, …)``).
        update_id: The caller's id for it.
        payload: The request's payload (converted to ``receive``'s ``type``).
    """

    __slots__ = ("_answered", "name", "payload", "update_id")

    def __init__(self, name: str, update_id: str, payload: T) -> None:
        self.name = name
        self.update_id = update_id
        self.payload = payload
        self._answered = False

    def __repr__(self) -> str:
        return f"UpdateRequest({self.name!r}, update_id={self.update_id!r})"

    async def reply(self, value: Any = None) -> None:
        """Answer the caller with ``value`` (recorded; the caller's ``update`` returns it)."""
        await self._answer({"reply": value})

    async def reject(self, reason: str) -> None:
        """Refuse the request: the caller's ``update`` raises :class:`~starflow.UpdateRejected`."""
        if not isinstance(reason, str):
            raise InvalidArgument(f"reject() reason must be a string: {reason!r}")
        await self._answer({"rejected": reason})

    async def _answer(self, outcome: dict[str, Any]) -> None:
        engine = running_engine("UpdateRequest.reply" if "reply" in outcome
                                else "UpdateRequest.reject")
        if self._answered:
            raise StarflowError(f"update {self.name!r} ({self.update_id}) was already answered",
                                run_id=engine.run_id)
        await engine.answer_update(self.name, self.update_id, outcome)
        self._answered = True


@overload
async def receive(name: str, *, timeout: timedelta | None = None) -> UpdateRequest[Any]: ...
@overload
async def receive(name: str, *, timeout: timedelta | None = None,
                  type: type[T]) -> UpdateRequest[T]: ...


async def receive(name: str, *, timeout: timedelta | None = None,
                  type: Any = Any) -> UpdateRequest[Any]:
    """Wait durably for the next update named ``name``; answer it with ``reply``/``reject``.

    ::

        req = await starflow.receive("add_item", type=Item)
        items.append(req.payload)
        await req.reply(len(items))

    Requests are kept in the run's inbox until received, in arrival order.

    Raises:
        WaitTimeout: ``timeout`` passed before a request.
        StarflowError: outside a workflow run, or inside a step.
    """
    check_event(name, "receive")
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta()):
        raise InvalidArgument(f"receive timeout must be a positive timedelta: {timeout!r}")
    engine = running_engine("receive")
    while True:
        raw = await engine.wait(update_event(name), timeout, Any, kind="receive",
                                node_name=name)
        if not isinstance(raw, dict) or "id" not in raw:
            raise StarflowError(f"run {engine.run_id}: the recorded update request {raw!r} has "
                                "no id", run_id=engine.run_id)
        try:
            payload = serde.convert(raw.get("payload"), type,
                                    what=f"payload of update {name!r}", run_id=engine.run_id)
        except SerializationError as exc:
            # The caller's mistake, not the run's: it gets UpdateRejected saying why
            # (recorded, so a replay answers the same), and this receive waits for
            # the next request.
            await UpdateRequest(name, str(raw["id"]), None).reject(
                f"its payload does not match the type receive({name!r}) declares: {exc}")
            continue
        return UpdateRequest(name, str(raw["id"]), payload)
