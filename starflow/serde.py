"""JSON codec for everything starflow stores: msgspec, decoding by annotation.

Values go into the database as JSON. Anything msgspec can encode is accepted
(builtins, dataclasses, msgspec Structs, attrs classes, enums, datetimes,
UUIDs, Decimals…), and Pydantic v2 models (``model_dump(mode="json")``); on
the way back a value is converted to the annotated type, so a step annotated
``-> Receipt`` returns a ``Receipt``, not a dict (a Pydantic model through
``model_validate``, also inside ``list[...]``, ``Optional`` or a dataclass).

Pydantic stays optional: it is never imported here. A value or annotation is
a Pydantic model only if the ``pydantic`` module is already loaded (whoever
defined the model imported it) and the class derives from its ``BaseModel``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import inspect
import math
import re
import sys
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from .errors import CodecError, SerializationError
from .limits import MAX_NESTING_DEPTH, MAX_PAYLOAD_BYTES, MAX_VALUE_DEPTH, text_problem

__all__ = ["args_hash", "check_json_depth", "check_storable", "convert", "convert_call",
           "decode", "encode", "is_pydantic_model", "to_builtins"]

T = TypeVar("T")


def _stdlib_time_type(type_: Any) -> Any:
    # An annotation resolved while freezegun patches a module names FakeDatetime;
    # msgspec converts only to the stdlib class, which is in its MRO.
    if (isinstance(type_, type) and issubclass(type_, _dt.date | _dt.time)
            and type_.__module__ != "datetime"):
        return next((c for c in type_.__mro__ if c.__module__ == "datetime"), type_)
    return type_


def _pydantic_base() -> type | None:
    """Pydantic's ``BaseModel`` if some module imported pydantic, else ``None``.

    Never imports it: a model can exist only where pydantic was imported."""
    module = sys.modules.get("pydantic")
    base = getattr(module, "BaseModel", None)
    return base if isinstance(base, type) else None


def is_pydantic_model(type_: Any) -> bool:
    """Whether ``type_`` is a Pydantic (v2) model class."""
    base = _pydantic_base()
    return (base is not None and isinstance(type_, type) and issubclass(type_, base)
            and hasattr(type_, "model_validate"))


def _dec_hook(type_: Any, obj: Any) -> Any:
    # msgspec calls this for a type it does not know, at any depth (a model
    # in a list, an Optional, a dataclass field): a Pydantic model validates
    # its own JSON form. Its ValidationError is a ValueError, which msgspec
    # reports as a ValidationError with the path.
    if is_pydantic_model(type_):
        return type_.model_validate(obj)
    # What msgspec does without a hook: an instance passes (``object`` takes
    # anything), anything else is refused with its usual message.
    if isinstance(type_, type) and isinstance(obj, type_):
        return obj
    raise ValueError(f"Expected `{getattr(type_, '__name__', type_)}`, "
                     f"got `{type(obj).__name__}`")


def _enc_hook(obj: Any) -> Any:
    # msgspec encodes datetime, date and time but not their subclasses, such as
    # freezegun's FakeDatetime (what datetime.now() returns under a test
    # environment) or pendulum's: hand back the stdlib value, so the text is
    # exactly what msgspec writes for it ("Z" for UTC, not isoformat's
    # "+00:00"). The same instant must encode, and hash, the same whichever
    # class carries it, or a replay outside the fake time sees a changed call.
    if isinstance(obj, _dt.date | _dt.time):
        # The class from the MRO, not the module attribute: freezegun replaces
        # ``datetime.datetime`` itself while it patches.
        real = _stdlib_time_type(type(obj))
        if isinstance(obj, _dt.datetime):
            return real(obj.year, obj.month, obj.day, obj.hour, obj.minute, obj.second,
                        obj.microsecond, obj.tzinfo, fold=obj.fold)
        if isinstance(obj, _dt.date):
            return real(obj.year, obj.month, obj.day)
        return real(obj.hour, obj.minute, obj.second, obj.microsecond, obj.tzinfo,
                    fold=obj.fold)
    if is_pydantic_model(type(obj)):
        # The JSON form: what model_validate takes back, and what a replay sees.
        return obj.model_dump(mode="json")
    raise NotImplementedError(f"Encoding objects of type {type(obj).__name__} is unsupported")


_encoder = msgspec.json.Encoder(order="deterministic", enc_hook=_enc_hook)


_decoder = msgspec.json.Decoder()


#: What msgspec raises for a value it cannot encode (enc_hook refusals included;
#: RecursionError for a value nested past the interpreter's stack).
_REFUSALS = (TypeError, ValueError, OverflowError, NotImplementedError, RecursionError)


def _refused(what: str, exc: BaseException, run_id: str | None, node_id: str | None
             ) -> SerializationError:
    return SerializationError(
        f"{what} cannot be stored as JSON: {exc}. Use builtins, dataclasses, "
        "msgspec Structs, Pydantic models or other msgspec-supported types",
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


def _path(path: str, key: Any) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}[{key!r}]"


def _unstorable(value: Any, limit: int, path: str = "$", depth: int = 0
                ) -> tuple[str, str] | None:
    """The first part of builtins ``value`` that a database cannot hold, as
    (JSON path, reason), or ``None``. Iterative over siblings, recursive only
    to ``limit`` levels, so it never overflows the stack."""
    if isinstance(value, str):
        problem = text_problem(value)
        return None if problem is None else (path, f"the string {problem}")
    if isinstance(value, dict | list):
        if depth >= limit:
            return path, f"it is nested more than {limit} levels deep (lists and objects)"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str):
                problem = text_problem(key)
                if problem is not None:
                    return _path(path, key.encode("utf-8", "backslashreplace").decode()), \
                        f"the key {problem}"
            found = _unstorable(item, limit, _path(path, key), depth + 1)
            if found is not None:
                return found
    return None


def _as_builtins(value: Any) -> Any:
    if isinstance(value, str | dict | list):
        return value
    try:
        return msgspec.to_builtins(value, str_keys=True, enc_hook=_enc_hook)
    except _REFUSALS:
        return None


def _refuse_unstorable(value: Any, what: str, run_id: str | None, node_id: str | None,
                       limit: int = MAX_NESTING_DEPTH) -> SerializationError:
    found = _unstorable(_as_builtins(value), limit)
    path, reason = found if found is not None else ("$", "it cannot be encoded as UTF-8 JSON")
    if len(path) > 100:
        path = path[:80] + "…"
    where = f" (node {node_id})" if node_id else ""
    return SerializationError(
        f"{what}{where} cannot be stored: at {path} {reason}. It was not written; change "
        "the value (a NUL or lone surrogate can be escaped or base64-encoded, deep nesting "
        "flattened)", run_id=run_id, node_id=node_id)


def _check_encoded(data: bytes, value: Any, what: str, run_id: str | None,
                   node_id: str | None, limit: int) -> None:
    """Refuse encoded JSON that one of the databases cannot hold. Cheap for the
    usual value: a NUL shows as ``\\u0000`` in the JSON text, and a document with
    fewer brackets than the depth limit cannot be nested past it."""
    if len(data) > MAX_PAYLOAD_BYTES:
        raise SerializationError(
            f"{what} cannot be stored: it is {len(data)} bytes as JSON; the most is "
            f"{MAX_PAYLOAD_BYTES} bytes. It was not written; store large data elsewhere "
            "(an object store) and keep its key in the workflow", run_id=run_id,
            node_id=node_id)
    if (b"\\u0000" in data
            or data.count(b"[") + data.count(b"{") > limit) \
            and _unstorable(_as_builtins(value), limit) is not None:
        raise _refuse_unstorable(value, what, run_id, node_id, limit)


def check_storable(value: Any, *, what: str, run_id: str | None = None,
                   node_id: str | None = None) -> None:
    """Raise :class:`SerializationError` unless ``value`` can be stored on both
    databases inside any document that wraps it (see :mod:`starflow.limits`)."""
    encode(value, what=what, run_id=run_id, node_id=node_id, max_depth=MAX_VALUE_DEPTH)


def to_builtins(value: Any, *, what: str, run_id: str | None = None,
                node_id: str | None = None) -> Any:
    """Convert ``value`` to JSON-compatible builtins, or raise :class:`SerializationError`.

    The result is what a later decode of the stored JSON gives back, so a live
    execution sees the same value as its replay: dict keys become strings (JSON
    has no others), and NaN or infinity, which JSON cannot hold (msgspec would
    write ``null``), is refused. So is what either database cannot hold: a NUL
    character or lone surrogate in a string or key, nesting deeper than
    :data:`~starflow.limits.MAX_VALUE_DEPTH`, a document larger than
    :data:`~starflow.limits.MAX_PAYLOAD_BYTES`; the error names the JSON path.
    """
    return _builtins_and_data(value, what, run_id, node_id)[0]


def to_builtins_hashed(value: Any, *, what: str, run_id: str | None = None,
                       node_id: str | None = None) -> tuple[Any, str]:
    """:func:`to_builtins` and :func:`args_hash` of its result from one encoding."""
    builtins, data = _builtins_and_data(value, what, run_id, node_id)
    return builtins, hashlib.sha256(data).hexdigest()[:16]


def _builtins_and_data(value: Any, what: str, run_id: str | None, node_id: str | None
                       ) -> tuple[Any, bytes]:
    try:
        builtins = msgspec.to_builtins(value, order="deterministic", str_keys=True,
                                       enc_hook=_enc_hook)
    except RecursionError as exc:
        raise SerializationError(
            f"{what} cannot be stored: it is nested more than {MAX_VALUE_DEPTH} levels "
            "deep (lists, dicts, objects). It was not written; flatten it",
            run_id=run_id, node_id=node_id) from exc
    except _REFUSALS as exc:
        raise _refused(what, exc, run_id, node_id) from exc
    data = encode(builtins, what=what, run_id=run_id, node_id=node_id,
                  max_depth=MAX_VALUE_DEPTH)
    # A non-finite float is encoded as null: look for one only where a null appears.
    if b"null" in data:
        bad = _non_finite(builtins)
        if bad is not None:
            raise _refused(what, ValueError(f"{bad!r} has no JSON representation"),
                           run_id, node_id)
    return builtins, data


def encode(value: Any, *, what: str = "value", run_id: str | None = None,
           node_id: str | None = None, max_depth: int = MAX_NESTING_DEPTH) -> bytes:
    """Encode ``value`` as deterministic JSON bytes that both databases can hold.

    Args:
        max_depth: Most levels of nesting: a whole stored document's by default;
            :data:`~starflow.limits.MAX_VALUE_DEPTH` for a value still to be
            wrapped in one.

    Raises:
        SerializationError: the value cannot be encoded, or holds what a database
            cannot store (named by its JSON path).
    """
    try:
        data = _encoder.encode(value)
    except (UnicodeEncodeError, RecursionError) as exc:
        raise _refuse_unstorable(value, what, run_id, node_id, max_depth) from exc
    except _REFUSALS as exc:
        raise _refused(what, exc, run_id, node_id) from exc
    _check_encoded(data, value, what, run_id, node_id, max_depth)
    return data


#: A JSON string (skipped whole, brackets inside it do not nest) or a bracket.
_JSON_NESTING = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def check_json_depth(data: bytes | str, *, what: str, limit: int = MAX_VALUE_DEPTH) -> None:
    """Refuse JSON text you typed (a CLI argument, a form field) nested deeper than
    ``limit`` before it is decoded.

    The decoder recurses once per level and would stop with a raw
    ``RecursionError`` near 1,000 levels; the value would be refused past
    :data:`~starflow.limits.MAX_VALUE_DEPTH` anyway. This reads the text
    without recursion, and only when it holds more brackets than ``limit``.

    Raises:
        SerializationError: naming ``what`` and the limit.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return
    depth = 0
    for match in _JSON_NESTING.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                raise SerializationError(
                    f"{what} is nested more than {limit} levels deep (lists and objects), "
                    "more than starflow stores: flatten it")
        elif token in (b"]", b"}"):
            depth -= 1


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


#: The key that marks a stored JSON object as a codec envelope (see :mod:`starflow.codec`).
ENVELOPE_KEY = "$starflow.codec"


def refuse_envelope(value: Any, what: str, run_id: str | None = None,
                    node_id: str | None = None) -> None:
    """Raise :class:`CodecError` if ``value`` is a codec envelope: the process
    that read it has no codec, or one that could not open it (a codec opens
    envelopes before values get here)."""
    if isinstance(value, dict) and isinstance(value.get(ENVELOPE_KEY), str):
        key = value.get("key")
        how = f"{value[ENVELOPE_KEY]}, key {key}" if isinstance(key, str) \
            else value[ENVELOPE_KEY]
        where = f" (node {node_id})" if node_id else ""
        raise CodecError(
            f"{what}{where} is encoded ({how}) and this process cannot decode it (no codec, "
            "or one without that key): open Starflow with the codec that wrote it "
            "(Starflow.open(..., codec=...); STARFLOW_CODEC=module:attr for the CLI)",
            run_id=run_id, node_id=node_id)


def convert(value: Any, type_: Any, *, what: str = "stored value",
            run_id: str | None = None, node_id: str | None = None) -> Any:
    """Convert decoded builtins to ``type_`` (``Any`` / missing annotation: unchanged).

    Raises:
        CodecError: ``value`` is a codec envelope (this process has no codec).
        SerializationError: ``value`` does not fit ``type_``.
    """
    refuse_envelope(value, what, run_id, node_id)
    if type_ is Any or type_ is None or (type_ is type(None) and value is None):
        return value
    type_ = _stdlib_time_type(type_)
    try:
        return msgspec.convert(value, type_, strict=False, dec_hook=_dec_hook)
    except (msgspec.ValidationError, TypeError, NotImplementedError) as exc:
        raise SerializationError(
            f"{what} does not match the annotated type {_type_label(type_)}: {exc}",
            run_id=run_id,
            node_id=node_id,
        ) from exc


def _type_label(type_: Any) -> str:
    return f"{type_.__module__}.{type_.__qualname__}" if isinstance(type_, type) \
        else repr(type_)


def type_name(type_: Any) -> str | None:
    """``module:qualname`` of a class a payload converts to (what a wait records).

    ``None`` for ``Any`` and for what cannot be found again by name (a generic
    alias such as ``list[Order]``, a class defined inside a function).
    """
    if not isinstance(type_, type) or type_ is object:
        return None
    module, qualname = getattr(type_, "__module__", None), getattr(type_, "__qualname__", "")
    if not module or "<locals>" in qualname or module == "builtins":
        return None
    return f"{module}:{qualname}"


def loaded_type(name: str | None) -> type | None:
    """The class :func:`type_name` named, if its module is already imported here.

    Never imports anything: a process that does not hold the class (a client
    without the workflow's code) gets ``None`` and cannot check the payload.
    """
    if not name or ":" not in name:
        return None
    module, _, qualname = name.partition(":")
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def args_hash(args: Any) -> str:
    """Stable short hash of already-converted step arguments."""
    return hashlib.sha256(_encoder.encode(args)).hexdigest()[:16]


def convert_call(signature: inspect.Signature, hints: Mapping[str, Any], data: Any, *,
                 what: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Rebuild call arguments stored as ``{"args": [...], "kwargs": {...}}``.

    Each value is converted to its parameter's annotation in ``hints``; values
    of unannotated parameters stay as stored.
    """
    refuse_envelope(data, f"the arguments of {what}")
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
