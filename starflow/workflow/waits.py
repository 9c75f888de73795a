"""``wait_for``, ``sleep``, ``now``, ``patched`` and ``wake_token`` for workflow code.

A wait that is not already satisfied pauses the run durably: the engine
writes the state model's ``enterDurableWait`` sequence (run paused,
checkpoint, phase) and only then registers the wake. The process may exit;
a signal, a token or a timer wakes the run, which replays to this point and
returns the delivered payload.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

from ..adapters.base import WorkflowStateAdapter
from ..errors import InvalidArgument, StarflowError
from ..records import SignalRecord

# Wake tokens are signed and redacted in the base layer (tokens.py); the two
# names stay importable here, where the wake-token guide first documented them.
from ..tokens import REDACTED, redact_wake_tokens
from .context import check_event, running_engine
from .threads import threadable

__all__ = [
    "ANY_KIND",
    "ANY_SEPARATOR",
    "REDACTED",
    "check_event",
    "first_signal",
    "now",
    "patched",
    "redact_wake_tokens",
    "sleep",
    "wait_events",
    "wait_for",
    "wait_for_any",
    "wake_token",
]

#: The node kind of a ``wait_for_any`` (``any:approve|reject#1``) and the separator
#: of its events, in the node id and in the wait row's ``event`` column.
ANY_KIND = "any"
ANY_SEPARATOR = "|"

T = TypeVar("T")


@overload
async def wait_for(event: str, *, timeout: timedelta | None = None) -> Any: ...
@overload
async def wait_for(event: str, *, timeout: timedelta | None = None, type: type[T]) -> T: ...


@threadable
async def wait_for(event: str, *, timeout: timedelta | None = None, type: Any = Any) -> Any:
    """Wait durably for a signal named ``event`` and return its payload.

    A signal sent before the run reaches this wait is kept and delivered here.

    Args:
        event: The signal name (``Starflow.signal(run_id, event, payload)``).
        timeout: Give up after this long: raises :class:`~starflow.WaitTimeout`.
        type: Convert the payload to this type (a dataclass, Struct…).

    Raises:
        WaitTimeout: the timeout passed before the signal.
        StarflowError: called outside a workflow run, or inside a step (a wait
            pauses the whole run: call it from the workflow function).
    """
    check_event(event, "wait_for")
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta()):
        raise StarflowError(f"wait_for timeout must be a positive timedelta: {timeout!r}")
    return await running_engine("wait_for").wait(event, timeout, type)


@threadable
async def wait_for_any(*events: str, timeout: timedelta | None = None,
                       types: Mapping[str, Any] | None = None) -> tuple[str, Any]:
    """Wait durably for the first of several signals; return ``(event, payload)``.

    ::

        event, payload = await starflow.wait_for_any("approve", "reject",
                                                     timeout=timedelta(days=2))

    The oldest queued signal among ``events`` wins (a signal sent before the
    run got here counts); signals for the other events stay in the inbox for
    a later wait. Recorded as one node (``any:approve|reject#1``), so a replay
    returns the same winner. Two signals racing for a paused run: exactly one
    wakes it, the other is kept.

    Args:
        events: Two or more distinct signal names (without ``#`` or ``|``).
        timeout: Give up after this long: raises :class:`~starflow.WaitTimeout`.
        types: Convert the payload of an event to a type, per event name
            (``{"approve": Approval}``); others are returned as decoded JSON.

    Raises:
        WaitTimeout: the timeout passed before any of the signals.
        InvalidArgument: fewer than two events, a repeated or bad name, a
            ``types`` key that is not one of ``events``.
        StarflowError: called outside a workflow run, or inside a step.
    """
    names = check_any_events(events)
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta()):
        raise InvalidArgument(f"wait_for_any timeout must be a positive timedelta: {timeout!r}")
    chosen = dict(types or {})
    unknown = sorted(set(chosen) - set(names), key=str)
    if unknown:
        raise InvalidArgument(f"wait_for_any types= names events it does not wait for: "
                              f"{unknown!r} (events: {list(names)!r})")
    result: tuple[str, Any] = await running_engine("wait_for_any").wait_any(names, timeout, chosen)
    return result


def check_any_events(events: Iterable[object]) -> tuple[str, ...]:
    """The events of a ``wait_for_any``, checked: two or more, distinct, each a
    signal name without ``|`` (the separator of the node id)."""
    names = tuple(events)
    if len(names) < 2:
        raise InvalidArgument(f"wait_for_any needs two or more events, got {list(names)!r}: "
                              "for one event use wait_for")
    for name in names:
        check_event(name, "wait_for_any")
        assert isinstance(name, str)
        if ANY_SEPARATOR in name:
            raise InvalidArgument(f"wait_for_any event names may not contain "
                                  f"{ANY_SEPARATOR!r}: {name!r}")
    if len(set(names)) != len(names):
        raise InvalidArgument(f"wait_for_any events must be distinct: {list(names)!r}")
    return names  # type: ignore[return-value]


def wait_events(node_id: str, event: str | None) -> tuple[str, ...]:
    """The signal names that wake a wait: its ``event``, or each event of a
    ``wait_for_any`` node (``any:…``). None for a sleep or a step job."""
    if event is None:
        return ()
    if node_id.startswith(ANY_KIND + ":"):
        return tuple(event.split(ANY_SEPARATOR))
    return (event,)


async def first_signal(adapter: WorkflowStateAdapter, run_id: str,
                       events: Iterable[str]) -> SignalRecord | None:
    """The oldest queued signal for any of ``events`` (inbox order is signal id)."""
    found = [s for s in [await adapter.find_signal(run_id, e) for e in events] if s is not None]
    return min(found, key=lambda s: s.id) if found else None


@threadable
async def sleep(duration: timedelta) -> None:
    """Sleep durably: the run pauses, and a timer wakes it after ``duration``.

    Unlike ``asyncio.sleep`` no process needs to stay alive meanwhile. Call it
    from the workflow function, not from a step (``StarflowError`` there).
    """
    if not isinstance(duration, timedelta) or duration < timedelta():
        raise StarflowError(f"sleep duration must be a timedelta >= 0: {duration!r}")
    await running_engine("sleep").wait(None, duration, Any)


def now() -> datetime:
    """Deterministic current time for workflow code.

    The time of the run's latest recorded boundary (start, step completion,
    wake): the same value on every replay. Use it instead of
    ``datetime.now()`` in workflow code; steps may read real time freely.
    """
    return running_engine("now").now()


def patched(change_id: str) -> bool:
    """Guard a change to workflow code so runs that started before it keep replaying.

    ::

        if starflow.patched("send-sms"):
            await send_sms(order_id)      # new code path
        else:
            await send_email(order_id)    # what the old code did

    Returns True for a run that reaches this point for the first time with this
    code (and records a ``patch:<change_id>#1`` marker with its next boundary),
    and on every replay of such a run. Returns False when the run's history
    already went past this point without the marker: the old code ran there,
    so the old path must be replayed. Once no run older than the patch is left,
    delete the ``else`` branch and the ``patched()`` call; markers left in
    histories are ignored. Call it from workflow code, not from steps.

    Raises:
        StarflowError: outside a workflow run, or a bad ``change_id``.
    """
    if not isinstance(change_id, str) or not change_id or "#" in change_id:
        raise StarflowError(f"patched() change_id must be a non-empty string without '#': "
                            f"{change_id!r}")
    return running_engine("patched").patched(change_id)


def wake_token(event: str, *, timeout: timedelta | None = None) -> str:
    """The wake token of the next ``wait_for(event)``, before the run reaches that wait.

    Hand it to an external system from a step; that system later calls
    ``Starflow.resume(token, payload)`` and the wait returns ``payload``. A
    resume that arrives before the run reaches the wait is kept and delivered
    there (like an early signal). Compute it inside the step that sends it:
    a token passed as a step *argument* is part of the step's recorded
    argument hash, which changes if the signing key is rotated.

    Args:
        event: The event the workflow will wait on.
        timeout: The ``timeout`` that wait will use: the token expires one day
            after it (default: ``StarflowConfig.wake_token_ttl``).

    Raises:
        StarflowError: outside a workflow run, or a bad event name.
    """
    check_event(event, "wake_token")
    return running_engine("wake_token").wake_token_for(event, timeout)
