"""``wait_for``, ``sleep`` and ``now`` for workflow code, and HMAC wake tokens.

A wait that is not already satisfied pauses the run durably: the engine
writes the state model's ``enterDurableWait`` sequence (run paused,
checkpoint, phase) and only then registers the wake. The process may exit;
a signal, a token or a timer wakes the run, which replays to this point and
returns the delivered payload.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

import msgspec

from .context import current_engine
from .errors import InvalidArgument, InvalidWakeToken, StarflowError
from .limits import check_name

__all__ = [
    "REDACTED",
    "Keyring",
    "WakeClaims",
    "check_event",
    "now",
    "patched",
    "redact_wake_tokens",
    "sleep",
    "wait_for",
    "wake_token",
]

T = TypeVar("T")


def check_event(event: object, what: str, *, run_id: str | None = None) -> str:
    """The one rule for a signal name: a non-empty string without ``#`` (node ids
    are ``wait:<event>#<n>``). Shared by ``wait_for``, ``wake_token`` and
    ``Starflow.signal``, so a signal is never kept for a wait that cannot exist."""
    if not isinstance(event, str) or not event or "#" in event:
        raise InvalidArgument(f"{what} event must be a non-empty string without '#': "
                              f"{event!r}", run_id=run_id)
    check_name(f"{what} event", event, run_id=run_id)
    return event


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


#: What a redacted wake token reads as.
REDACTED = "[redacted]"


def redact_wake_tokens(value: Any) -> Any:
    """A copy of ``value`` with every ``wake_token`` entry replaced by ``"[redacted]"``.

    Wake tokens are bearer secrets: the warm tier, dashboards and logs show
    payloads (``run_paused`` events, checkpoints) through this.
    """
    if isinstance(value, Mapping):
        return {k: (REDACTED if k == "wake_token" and v is not None
                    else redact_wake_tokens(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_wake_tokens(v) for v in value]
    return value


# ---------------------------------------------------------------------------
# Wake tokens
# ---------------------------------------------------------------------------

_PREFIX = "sfw1"


class WakeClaims(msgspec.Struct, frozen=True):
    """What a wake token asserts."""

    r: str  # run id
    n: str  # node id
    w: str  # workspace
    e: str  # env
    x: int  # expiry, unix seconds


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Keyring:
    """HMAC-SHA256 keys: the first signs, all verify (rotation)."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        if not keys:
            raise StarflowError("a wake-token keyring needs at least one key")
        self._keys = {kid: secret.encode() for kid, secret in keys.items()}
        self.signing_kid = next(iter(keys))

    def sign(self, claims: WakeClaims) -> str:
        body = _b64(msgspec.json.encode(claims))
        head = f"{_PREFIX}.{self.signing_kid}.{body}"
        mac = hmac.new(self._keys[self.signing_kid], head.encode(), hashlib.sha256).digest()
        return f"{head}.{_b64(mac)}"

    def verify(self, token: str, *, workspace_id: str, env: str, now: datetime) -> WakeClaims:
        """Check signature, scope and expiry in constant time per key.

        Raises:
            InvalidWakeToken: with reason ``malformed``, ``unknown_key``,
                ``bad_signature``, ``wrong_workspace`` or ``expired``.
        """
        if not isinstance(token, str):
            raise InvalidWakeToken("malformed", "a wake token is a string")
        if not token.isascii():
            # Tokens are base64url and dots only; anything else (a lone surrogate
            # included, which cannot even be encoded) is not one.
            raise InvalidWakeToken("malformed", "a wake token is ASCII text")
        parts = token.split(".")
        if len(parts) != 4 or parts[0] != _PREFIX:
            raise InvalidWakeToken("malformed", "not a starflow wake token (sfw1.kid.body.mac)")
        _, kid, body, mac_text = parts
        key = self._keys.get(kid)
        if key is None:
            raise InvalidWakeToken("unknown_key", f"no key {kid!r} in the keyring")
        expected = hmac.new(key, f"{_PREFIX}.{kid}.{body}".encode(), hashlib.sha256).digest()
        # Compare the canonical text, not decoded bytes: base64 decoding ignores
        # stray characters and the unused low bits of the last one, so several
        # spellings decode to one MAC and a mutated token would still verify.
        if not hmac.compare_digest(mac_text.encode("utf-8", "surrogatepass"),
                                   _b64(expected).encode()):
            raise InvalidWakeToken("bad_signature", "signature does not match: forged or altered")
        try:
            claims = msgspec.json.decode(_unb64(body), type=WakeClaims)
        except (ValueError, TypeError, msgspec.DecodeError) as exc:
            raise InvalidWakeToken("malformed", "token body is unreadable") from exc
        if claims.w != workspace_id or claims.e != env:
            raise InvalidWakeToken("wrong_workspace",
                                   f"token belongs to {claims.w}/{claims.e}, "
                                   f"not {workspace_id}/{env}",
                                   run_id=claims.r, node_id=claims.n)
        if now.timestamp() >= claims.x:
            raise InvalidWakeToken("expired", "the token's expiry has passed",
                                   run_id=claims.r, node_id=claims.n)
        return claims
