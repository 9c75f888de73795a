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

``receive("a", "b")`` waits for the first request of several names, and
:func:`wait_for_message` for the first of several signals and updates: both
are one ``wait_for_any`` node (``any:<event>|<event>…#n``) over the inbox
events, so the oldest queued message among them wins and a replay returns
the same one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, Literal, TypeVar, overload

from .. import serde
from ..errors import InvalidArgument, SerializationError, StarflowError
from ..limits import check_name
from .context import RunningEngine, check_event, running_engine
from .threads import threadable
from .waits import ANY_SEPARATOR

__all__ = [
    "UPDATE_MARKER_PREFIX",
    "UPDATE_PREFIX",
    "Message",
    "UpdateRequest",
    "receive",
    "update_event",
    "update_marker",
    "wait_for_message",
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

    @threadable
    async def reply(self, value: Any = None) -> None:
        """Answer the caller with ``value`` (recorded; the caller's ``update`` returns it)."""
        await self._answer({"reply": value})

    @threadable
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


@dataclass(frozen=True, slots=True)
class Message:
    """What :func:`wait_for_message` returns: the signal or the update that came first.

    Attributes:
        kind: ``"signal"`` or ``"update"``.
        name: The signal's event name, or the update's name.
        payload: The signal's or the request's payload (converted to the
            type ``types=`` gives for ``name``).
        update: For an update, the request to answer with ``reply`` /
            ``reject``; ``None`` for a signal.
    """

    kind: Literal["signal", "update"]
    name: str
    payload: Any
    update: UpdateRequest[Any] | None = None


def _check_timeout(timeout: object, what: str) -> None:
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta()):
        raise InvalidArgument(f"{what} timeout must be a positive timedelta: {timeout!r}")


def _check_names(names: Iterable[object], what: str) -> tuple[str, ...]:
    """Message names: each a valid signal name without ``|`` (the separator of
    the ``any:`` node id), none repeated."""
    checked = tuple(check_event(name, what) for name in names)
    for name in checked:
        if ANY_SEPARATOR in name:
            raise InvalidArgument(f"{what} names may not contain {ANY_SEPARATOR!r} when it "
                                  f"waits for several: {name!r}")
    if len(set(checked)) != len(checked):
        raise InvalidArgument(f"{what} names must be distinct: {list(checked)!r}")
    return checked


@overload
async def receive(name: str, *names: str, timeout: timedelta | None = None
                  ) -> UpdateRequest[Any]: ...
@overload
async def receive(name: str, *names: str, timeout: timedelta | None = None,
                  type: type[T]) -> UpdateRequest[T]: ...


@threadable
async def receive(name: str, *names: str, timeout: timedelta | None = None,
                  type: Any = Any) -> UpdateRequest[Any]:
    """Wait durably for the next update named ``name`` (or any of ``names`` too);
    answer it with ``reply``/``reject``.

    ::

        req = await starflow.receive("add_item", type=Item)
        items.append(req.payload)
        await req.reply(len(items))

        req = await starflow.receive("add_item", "checkout")  # whichever comes first
        if req.name == "checkout": ...

    Requests are kept in the run's inbox until received, in arrival order;
    with several names the oldest request among them wins and the others
    stay queued.

    Raises:
        WaitTimeout: ``timeout`` passed before a request.
        InvalidArgument: a bad or repeated name, a bad timeout.
        StarflowError: outside a workflow run, or inside a step.
    """
    if names:
        every = _check_names((name, *names), "receive")
        _check_timeout(timeout, "receive")
        engine = running_engine("receive")
        message = await _first_message(engine, (), every, timeout, {n: type for n in every})
        assert message.update is not None
        return message.update
    check_event(name, "receive")
    _check_timeout(timeout, "receive")
    engine = running_engine("receive")
    while True:
        raw = await engine.wait(update_event(name), timeout, Any, kind="receive",
                                node_name=name)
        request = await _request(engine, name, raw, type)
        if request is not None:
            return request


@threadable
async def wait_for_message(*, signals: Iterable[str] = (), updates: Iterable[str] = (),
                           timeout: timedelta | None = None,
                           types: Mapping[str, Any] | None = None) -> Message:
    """Wait durably for the first of several signals and updates; return it as a :class:`Message`.

    ::

        msg = await starflow.wait_for_message(signals=["cancel"],
                                              updates=["add_item", "checkout"])
        if msg.update is not None:
            await msg.update.reply("ok")

    The oldest queued message among them wins (one sent before the run got
    here counts); the others stay in the inbox for a later wait. Recorded as
    one ``wait_for_any`` node, so a replay returns the same message. An
    update whose payload does not fit its type is rejected (its caller gets
    :class:`~starflow.UpdateRejected`) and the wait goes on.

    Args:
        signals: Signal names (``Starflow.signal(run_id, name, ...)``).
        updates: Update names (``Starflow.update(run_id, name, ...)``).
        timeout: Give up after this long: raises :class:`~starflow.WaitTimeout`.
        types: Convert a message's payload to a type, by name.

    Raises:
        WaitTimeout: the timeout passed before any message.
        InvalidArgument: no names, a name repeated (within or across
            ``signals`` and ``updates``), a bad name or timeout, a ``types``
            key that names no message.
        StarflowError: outside a workflow run, or inside a step.
    """
    if isinstance(signals, str) or isinstance(updates, str):
        raise InvalidArgument("wait_for_message signals= and updates= take lists of names, "
                              f"not one string: signals={signals!r}, updates={updates!r}")
    signal_names, update_names = tuple(signals), tuple(updates)
    every = _check_names((*signal_names, *update_names), "wait_for_message")
    if not every:
        raise InvalidArgument("wait_for_message needs at least one signal or update name")
    _check_timeout(timeout, "wait_for_message")
    chosen = dict(types or {})
    unknown = sorted(set(chosen) - set(every), key=str)
    if unknown:
        raise InvalidArgument(f"wait_for_message types= names messages it does not wait for: "
                              f"{unknown!r} (names: {list(every)!r})")
    engine = running_engine("wait_for_message")
    return await _first_message(engine, signal_names, update_names, timeout, chosen)


async def _first_message(engine: RunningEngine, signals: tuple[str, ...],
                         updates: tuple[str, ...], timeout: timedelta | None,
                         types: Mapping[str, Any]) -> Message:
    """One ``wait_for_any`` over the signals' events and the updates' inbox events,
    again after an update it had to reject."""
    events = {**{s: ("signal", s) for s in signals},
              **{update_event(u): ("update", u) for u in updates}}
    signal_types = {s: types[s] for s in signals if s in types}
    while True:
        event, raw = await engine.wait_any(tuple(events), timeout, signal_types)
        kind, name = events[event]
        if kind == "signal":
            return Message("signal", name, raw)
        request = await _request(engine, name, raw, types.get(name, Any))
        if request is not None:
            return Message("update", name, request.payload, request)


async def _request(engine: RunningEngine, name: str, raw: Any, type_: Any
                   ) -> UpdateRequest[Any] | None:
    """The request a recorded update message holds, or None once rejected for a
    payload that does not fit ``type_`` (the caller's mistake, not the run's)."""
    if not isinstance(raw, dict) or "id" not in raw:
        raise StarflowError(f"run {engine.run_id}: the recorded update request {raw!r} has "
                            "no id", run_id=engine.run_id)
    try:
        payload = serde.convert(raw.get("payload"), type_,
                                what=f"payload of update {name!r}", run_id=engine.run_id)
    except SerializationError as exc:
        # The caller gets UpdateRejected saying why (recorded, so a replay answers
        # the same), and the wait goes on for the next request.
        await UpdateRequest(name, str(raw["id"]), None).reject(
            f"its payload does not match the type receive({name!r}) declares: {exc}")
        return None
    return UpdateRequest(name, str(raw["id"]), payload)
