"""JSON codec for everything starflow stores: msgspec, decoding by annotation.

Values go into the database as JSON. Anything msgspec can encode is accepted
(builtins, dataclasses, msgspec Structs, attrs classes, enums, datetimes,
UUIDs, Decimals…); on the way back a value is converted to the annotated type,
so a step annotated ``-> Receipt`` returns a ``Receipt``, not a dict.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import inspect
import math
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from .errors import SerializationError

__all__ = ["args_hash", "convert", "convert_call", "decode", "encode", "to_builtins"]

T = TypeVar("T")


def _enc_hook(obj: Any) -> Any:
    # msgspec encodes datetime, date and time but not their subclasses, such as
    # freezegun's FakeDatetime (what datetime.now() returns under a test
    # environment) or pendulum's: store them as the ISO text msgspec would write.
    if isinstance(obj, _dt.date | _dt.time):
        return obj.isoformat()
    raise NotImplementedError(f"Encoding objects of type {type(obj).__name__} is unsupported")


_encoder = msgspec.json.Encoder(order="deterministic", enc_hook=_enc_hook)


def _stdlib_time_type(type_: Any) -> Any:
    # An annotation resolved while freezegun patches a module names FakeDatetime;
    # msgspec converts only to the stdlib class, which is in its MRO.
    if (isinstance(type_, type) and issubclass(type_, _dt.date | _dt.time)
            and type_.__module__ != "datetime"):
        return next((c for c in type_.__mro__ if c.__module__ == "datetime"), type_)
    return type_
_decoder = msgspec.json.Decoder()


#: What msgspec raises for a value it cannot encode (enc_hook refusals included).
_REFUSALS = (TypeError, ValueError, OverflowError, NotImplementedError)


def _refused(what: str, exc: BaseException, run_id: str | None, node_id: str | None
             ) -> SerializationError:
    return SerializationError(
        f"{what} cannot be stored as JSON: {exc}. Use builtins, dataclasses, "
        "msgspec Structs or other msgspec-supported types",
        run_id=run_id, node_id=node_id)


def _non_finite(value: Any) -> float | None:
    """The first NaN or infinity inside builtins ``value``, if any."""
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, list):
        return None
    for item in value:
        found = _non_finite(item)
        if found is not None:
            return found
    return None


def to_builtins(value: Any, *, what: str, run_id: str | None = None,
                node_id: str | None = None) -> Any:
    """Convert ``value`` to JSON-compatible builtins, or raise :class:`SerializationError`.

    The result is what a later decode of the stored JSON gives back, so a live
    execution sees the same value as its replay: dict keys become strings (JSON
    has no others), and NaN or infinity, which JSON cannot hold (msgspec would
    write ``null``), is refused.
    """
    try:
        builtins = msgspec.to_builtins(value, order="deterministic", str_keys=True,
                                       enc_hook=_enc_hook)
    except _REFUSALS as exc:
        raise _refused(what, exc, run_id, node_id) from exc
    # A non-finite float is encoded as null: look for one only where a null appears.
    if b"null" in _encoder.encode(builtins):
        bad = _non_finite(builtins)
        if bad is not None:
            raise _refused(what, ValueError(f"{bad!r} has no JSON representation"),
                           run_id, node_id)
    return builtins


def encode(value: Any, *, what: str = "value", run_id: str | None = None,
           node_id: str | None = None) -> bytes:
    """Encode ``value`` as deterministic JSON bytes."""
    try:
        return _encoder.encode(value)
    except _REFUSALS as exc:
        raise _refused(what, exc, run_id, node_id) from exc


def decode(data: bytes | str, *, what: str = "stored value", sort_keys: bool = False) -> Any:
    """Decode JSON to builtins.

    Args:
        sort_keys: Put every object's keys back in the order :func:`encode` and
            :func:`to_builtins` give them (sorted), for stores that reorder them
            (PostgreSQL's jsonb keeps the shortest keys first). Replay must see a
            recorded dict in the order the first execution saw.
    """
    try:
        value = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise SerializationError(f"{what} is not valid JSON: {exc}") from exc
    return msgspec.to_builtins(value, order="deterministic") if sort_keys else value


def convert(value: Any, type_: Any, *, what: str = "stored value",
            run_id: str | None = None, node_id: str | None = None) -> Any:
    """Convert decoded builtins to ``type_`` (``Any`` / missing annotation: unchanged)."""
    if type_ is Any or type_ is None or (type_ is type(None) and value is None):
        return value
    type_ = _stdlib_time_type(type_)
    try:
        return msgspec.convert(value, type_, strict=False)
    except (msgspec.ValidationError, TypeError) as exc:
        raise SerializationError(
            f"{what} does not match the annotated type {type_!r}: {exc}",
            run_id=run_id,
            node_id=node_id,
        ) from exc


def args_hash(args: Any) -> str:
    """Stable short hash of already-converted step arguments."""
    return hashlib.sha256(_encoder.encode(args)).hexdigest()[:16]


def convert_call(signature: inspect.Signature, hints: Mapping[str, Any], data: Any, *,
                 what: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Rebuild call arguments stored as ``{"args": [...], "kwargs": {...}}``.

    Each value is converted to its parameter's annotation in ``hints``; values
    of unannotated parameters stay as stored.
    """
    data = data or {}
    args = list(data.get("args", []))
    kwargs = dict(data.get("kwargs", {}))
    params = [p for p in signature.parameters.values()
              if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                            inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for i, value in enumerate(args):
        if i < len(params) and params[i].name in hints:
            args[i] = convert(value, hints[params[i].name],
                              what=f"argument {params[i].name!r} of {what}")
    for name, value in kwargs.items():
        if name in hints:
            kwargs[name] = convert(value, hints[name], what=f"argument {name!r} of {what}")
    return tuple(args), kwargs
