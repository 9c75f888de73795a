"""Wake tokens and their redaction: HMAC signing with key rotation.

A wake token is a bearer secret that resumes one paused wait
(``sfw1.<kid>.<claims>.<mac>``). :class:`Keyring` signs with its first key and
verifies with all of them; :func:`redact_wake_tokens` hides tokens wherever
payloads leave the cold tier (the warm tier, exports, the CLI, logs). Both the
runtime (which mints and checks tokens) and the warm tier (which must never
store one) use this module, so it sits in the base layer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec

from .errors import InvalidWakeToken, StarflowError
from .limits import WAKE_TOKEN_PREFIX

__all__ = ["REDACTED", "Keyring", "WakeClaims", "redact_wake_tokens"]


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

#: ``sfw1``: no run key starts with it (a run key and a token never clash).
_PREFIX = WAKE_TOKEN_PREFIX.rstrip(".")


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
