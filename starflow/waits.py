"""``wait_for``, ``sleep``, ``now``, ``patched`` and ``wake_token`` for workflow code.

A wait that is not already satisfied pauses the run durably: the engine
writes the state model's ``enterDurableWait`` sequence (run paused,
checkpoint, phase) and only then registers the wake. The process may exit;
a signal, a token or a timer wakes the run, which replays to this point and
returns the delivered payload.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

from .context import check_event, current_engine
from .errors import StarflowError

# Wake tokens are signed and redacted in the base layer (tokens.py); the two
# names stay importable here, where the wake-token guide first documented them.
from .tokens import REDACTED, redact_wake_tokens

__all__ = [
    "REDACTED",
    "check_event",
    "now",
    "patched",
    "redact_wake_tokens",
    "sleep",
    "wait_for",
    "wake_token",
]

T = TypeVar("T")


def _engine(what: str) -> Any:
    engine = current_engine.get()
    if engine is None:
        raise StarflowError(
            f"starflow.{what}() called outside a workflow run: call it from a @workflow function"
        )
    return engine


@overload
async def wait_for(event: str, *, timeout: timedelta | None = None) -> Any: ...
@overload
async def wait_for(event: str, *, timeout: timedelta | None = None, type: type[T]) -> T: ...


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
    return await _engine("wait_for").wait(event, timeout, type)


async def sleep(duration: timedelta) -> None:
    """Sleep durably: the run pauses, and a timer wakes it after ``duration``.

    Unlike ``asyncio.sleep`` no process needs to stay alive meanwhile. Call it
    from the workflow function, not from a step (``StarflowError`` there).
    """
    if not isinstance(duration, timedelta) or duration < timedelta():
        raise StarflowError(f"sleep duration must be a timedelta >= 0: {duration!r}")
    await _engine("sleep").wait(None, duration, Any)


def now() -> datetime:
    """Deterministic current time for workflow code.

    The time of the run's latest recorded boundary (start, step completion,
    wake): the same value on every replay. Use it instead of
    ``datetime.now()`` in workflow code; steps may read real time freely.
    """
    return _engine("now").now()  # type: ignore[no-any-return]


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
    return _engine("patched").patched(change_id)  # type: ignore[no-any-return]


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
    return _engine("wake_token").wake_token_for(event, timeout)  # type: ignore[no-any-return]
