"""Codecs over stored payloads: compression and encryption at rest.

A codec turns bytes into bytes (:class:`PayloadCodec`). ``Starflow.open(...,
codec=...)`` applies it to every user value starflow stores (workflow and
step arguments, results, signal and update payloads, events, stream items,
session values, schedule arguments): the value's JSON is encoded and stored
as an *envelope*, itself JSON, so both databases still hold a JSON document::

    {"$starflow.codec": "zlib+aesgcm", "key": "k2", "data": "<base64>"}

``$starflow.codec`` names the codecs applied, in order; ``key`` is the
encryption key's id (absent for a codec without keys). A stored value that is
not an envelope (written before the codec was configured) is read as it is,
so a history may mix both. A process without the codec sees the envelope, and
the CLI and the web page show it as ``encrypted (aesgcm, key k2)``
(:func:`describe`), never as bytes.

Decoding follows the envelope, not the configuration: a payload written by
``aesgcm`` alone decodes under ``CodecChain(ZlibCodec(), AesGcmCodec(...))``,
and :class:`AesGcmCodec` decrypts with the key the payload names (key
rotation: add the new key, make it ``active``, keep the old ones while runs
encrypted with them are kept).
"""

from __future__ import annotations

import base64
import binascii
import os
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from . import serde
from .errors import CodecError, ConfigError, SerializationError

__all__ = ["ENVELOPE_KEY", "AesGcmCodec", "CodecChain", "PayloadCodec", "Payloads",
           "ZlibCodec", "describe", "is_encoded", "show_encoded"]

#: The key that marks a stored JSON object as an encoded payload.
ENVELOPE_KEY = serde.ENVELOPE_KEY


@runtime_checkable
class PayloadCodec(Protocol):
    """Bytes in, bytes out: what ``Starflow.open(codec=...)`` takes.

    Attributes:
        name: Written into every envelope it encodes (``"zlib"``, ``"aesgcm"``):
            stable, non-empty, without ``+``. Decoding looks the codec up by it.

    A codec may also have a ``key_id`` attribute (``str | None``): the id of the
    key :meth:`encode` uses, stored in the envelope and shown by the CLI and the
    web page (a payload with a key id is shown as "encrypted").
    """

    name: str

    def encode(self, data: bytes) -> bytes:
        """Encode the JSON bytes of one stored value."""
        ...

    def decode(self, data: bytes) -> bytes:
        """Undo :meth:`encode`; raise :class:`~starflow.CodecError` for data it
        cannot decode (a ``ValueError`` or ``TypeError`` is wrapped in one too)."""
        ...


class ZlibCodec:
    """Compression with :mod:`zlib` (the standard library).

    Args:
        level: 0 (none) to 9 (smallest); 6 by default.
    """

    name = "zlib"
    key_id: str | None = None

    def __init__(self, level: int = 6) -> None:
        if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 9:
            raise ConfigError(f"ZlibCodec level must be an int from 0 to 9: {level!r}")
        self.level = level

    def encode(self, data: bytes) -> bytes:
        return zlib.compress(data, self.level)

    def decode(self, data: bytes) -> bytes:
        try:
            return zlib.decompress(data)
        except zlib.error as exc:
            raise CodecError(f"zlib cannot decompress it ({exc}): corrupt data") from exc

    def __repr__(self) -> str:
        return f"ZlibCodec(level={self.level})"


_AES_VERSION = 1
_NONCE = 12


class AesGcmCodec:
    """Authenticated encryption with AES-GCM, with key rotation.

    Each payload is encrypted with the ``active`` key and a random 96-bit
    nonce; the key's id is stored with it (and authenticated), so payloads
    encrypted with an older key still decrypt as long as that key is in
    ``keys``. Needs the ``cryptography`` package: ``pip install 'starflow-durable[crypto]'``.

    Args:
        keys: Key id -> key (16, 24 or 32 bytes: AES-128, -192, -256). Keep
            every key some stored payload was encrypted with.
        active: The id of the key new payloads are encrypted with.

    Example::

        codec = AesGcmCodec(keys={"k2": new_key, "k1": old_key}, active="k2")
    """

    name = "aesgcm"

    def __init__(self, keys: Mapping[str, bytes], active: str) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:  # pragma: no cover - the extra is installed in tests
            raise ConfigError("AesGcmCodec needs the cryptography package: install it "
                              "with: pip install 'starflow-durable[crypto]'") from exc
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigError("AesGcmCodec keys must be a non-empty mapping of key id -> key")
        problems = []
        for kid, key in keys.items():
            if not isinstance(kid, str) or not kid or len(kid.encode()) > 255:
                problems.append(f"key id {kid!r} must be a non-empty string of at most "
                                "255 bytes")
            elif not isinstance(key, bytes) or len(key) not in (16, 24, 32):
                size = len(key) if isinstance(key, bytes) else type(key).__name__
                problems.append(f"key {kid!r} must be 16, 24 or 32 bytes, got {size}")
        if active not in keys:
            problems.append(f"active key {active!r} is not one of the keys "
                            f"({', '.join(map(repr, keys))})")
        if problems:
            raise ConfigError("AesGcmCodec: " + "; ".join(problems))
        self._ciphers = {kid: AESGCM(key) for kid, key in keys.items()}
        self.key_id: str | None = active

    @staticmethod
    def generate_key(bits: int = 256) -> bytes:
        """A new random key (256 bits by default) for :class:`AesGcmCodec`."""
        if bits not in (128, 192, 256):
            raise ConfigError(f"AES keys have 128, 192 or 256 bits, not {bits!r}")
        return os.urandom(bits // 8)

    def encode(self, data: bytes) -> bytes:
        kid = str(self.key_id).encode()
        header = bytes([_AES_VERSION, len(kid)]) + kid
        nonce = os.urandom(_NONCE)
        return header + nonce + self._ciphers[str(self.key_id)].encrypt(nonce, data, header)

    def decode(self, data: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        if len(data) < 2 or data[0] != _AES_VERSION or len(data) < 2 + data[1] + _NONCE + 16:
            raise CodecError("it is not an AesGcmCodec ciphertext (corrupt data)")
        end = 2 + data[1]
        header, kid = data[:end], data[2:end].decode("utf-8", "replace")
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise CodecError(
                f"it was encrypted with key {kid!r}, which this AesGcmCodec does not have "
                f"(it has {', '.join(map(repr, self._ciphers))}): add that key to "
                "AesGcmCodec(keys=...)")
        nonce = data[end:end + _NONCE]
        try:
            return cipher.decrypt(nonce, data[end + _NONCE:], header)
        except InvalidTag as exc:
            raise CodecError(
                f"it cannot be decrypted with key {kid!r}: the key is wrong (a different key "
                "under the same id) or the data was altered") from exc

    def __repr__(self) -> str:  # never the keys
        return f"AesGcmCodec(keys=[{', '.join(map(repr, self._ciphers))}], " \
            f"active={self.key_id!r})"


class CodecChain:
    """Several codecs applied in order (and undone in reverse).

    Compress before encrypting (ciphertext does not compress)::

        CodecChain(ZlibCodec(), AesGcmCodec(keys=..., active="k1"))
    """

    def __init__(self, *codecs: PayloadCodec) -> None:
        if not codecs:
            raise ConfigError("CodecChain needs at least one codec")
        flat: list[PayloadCodec] = []
        for codec in codecs:
            flat.extend(codec.codecs if isinstance(codec, CodecChain) else (codec,))
        self.codecs: tuple[PayloadCodec, ...] = tuple(flat)
        self.name = "+".join(c.name for c in self.codecs)

    @property
    def key_id(self) -> str | None:
        """The key id of the first member that has one."""
        return next((k for c in self.codecs if (k := _key_id(c)) is not None), None)

    def encode(self, data: bytes) -> bytes:
        for codec in self.codecs:
            data = codec.encode(data)
        return data

    def decode(self, data: bytes) -> bytes:
        for codec in reversed(self.codecs):
            data = codec.decode(data)
        return data

    def __repr__(self) -> str:
        return f"CodecChain({', '.join(map(repr, self.codecs))})"


def _key_id(codec: object) -> str | None:
    kid = getattr(codec, "key_id", None)
    return kid if isinstance(kid, str) else None


def is_encoded(value: Any) -> bool:
    """Whether a stored value is a codec envelope."""
    return isinstance(value, dict) and isinstance(value.get(ENVELOPE_KEY), str)


def describe(value: Any) -> str:
    """How to show an envelope to someone without the codec:
    ``encrypted (aesgcm, key k2)`` or ``encoded (zlib)``."""
    name = str(value.get(ENVELOPE_KEY))
    key = value.get("key")
    if isinstance(key, str):
        return f"encrypted ({name.replace('+', ', ')}, key {key})"
    return f"encoded ({name.replace('+', ', ')})"


def show_encoded(value: Any) -> Any:
    """``value`` with every envelope inside it replaced by its :func:`describe` text
    (for the CLI and the web page)."""
    if is_encoded(value):
        return describe(value)
    if isinstance(value, dict):
        return {k: show_encoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [show_encoded(v) for v in value]
    return value


class Payloads:
    """Seals stored values into envelopes and opens them again, with one codec.

    Args:
        codec: A :class:`PayloadCodec` (a :class:`CodecChain` for several).

    Raises:
        ConfigError: ``codec`` is not a codec, or a name is empty or has ``+``.
    """

    def __init__(self, codec: PayloadCodec) -> None:
        members = codec.codecs if isinstance(codec, CodecChain) else (codec,)
        problems = []
        for member in members:
            if not callable(getattr(member, "encode", None)) \
                    or not callable(getattr(member, "decode", None)):
                problems.append(f"{member!r} has no encode(bytes) / decode(bytes) methods")
                continue
            name = getattr(member, "name", None)
            if not isinstance(name, str) or not name or "+" in name:
                problems.append(f"{member!r}: name must be a non-empty string without '+', "
                                f"got {name!r}")
        if problems:
            raise ConfigError("codec: " + "; ".join(problems)
                              + " (see starflow.PayloadCodec)")
        self.codec = codec
        self.name = "+".join(m.name for m in members)
        self._by_name = {m.name: m for m in members}

    def seal(self, value: Any, *, what: str = "value", run_id: str | None = None,
             node_id: str | None = None) -> dict[str, Any]:
        """The envelope storing ``value`` (JSON builtins), encoded by the codec."""
        plain = serde.encode(value, what=what, run_id=run_id, node_id=node_id)
        data = self.codec.encode(plain)
        envelope: dict[str, Any] = {ENVELOPE_KEY: self.name,
                                    "data": base64.b64encode(data).decode("ascii")}
        kid = _key_id(self.codec)
        if kid is not None:
            envelope["key"] = kid
        return envelope

    def open(self, stored: Any, *, what: str = "stored value", run_id: str | None = None,
             node_id: str | None = None) -> Any:
        """The value an envelope holds; anything else (a value stored before the
        codec was configured) as it is.

        Raises:
            CodecError: the envelope cannot be decoded (a codec or key this one
                lacks, a wrong key, corrupt data), naming the run and node.
        """
        if not is_encoded(stored):
            return stored
        name = stored[ENVELOPE_KEY]
        where = f"{what} of run {run_id}" if run_id else what
        if node_id:
            where += f" (node {node_id})"
        names = name.split("+")
        missing = [n for n in names if n not in self._by_name]
        if missing:
            raise CodecError(
                f"{where} was encoded with {name!r}; this process's codec ({self.name!r}) "
                f"lacks {', '.join(map(repr, missing))}: open Starflow with a codec that "
                "includes it", run_id=run_id, node_id=node_id)
        try:
            data = base64.b64decode(str(stored.get("data", "")), validate=True)
            for part in reversed(names):
                data = self._by_name[part].decode(data)
        except CodecError as exc:
            raise CodecError(f"{where} cannot be decoded: {exc.message}", run_id=run_id,
                             node_id=node_id) from exc
        except (binascii.Error, ValueError, TypeError) as exc:
            raise CodecError(f"{where} cannot be decoded ({name}): {exc}", run_id=run_id,
                             node_id=node_id) from exc
        try:
            return serde.decode(data, what=where)
        except SerializationError as exc:
            raise CodecError(f"{where} decoded to bytes that are not JSON: the codec's "
                             f"decode does not undo its encode ({exc})", run_id=run_id,
                             node_id=node_id) from exc

    def names(self) -> Iterator[str]:
        """The names of the codecs this one can decode."""
        return iter(self._by_name)
