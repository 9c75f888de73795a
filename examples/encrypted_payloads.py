"""Encrypted, compressed payloads at rest, and a key rotation.

``Starflow.open(..., codec=...)`` encodes every value a run stores (its
arguments, step results, signals, events, streams, session values, result).
Here a card number goes through a workflow that pauses; the database holds
only ciphertext. The key is then rotated: the paused run resumes under the
new key (its step output, written under the old one, still decodes), and a
process without the codec sees "encrypted (…)" instead of the values.

    pip install 'starflow-durable[crypto]'
    python examples/encrypted_payloads.py
"""

from __future__ import annotations

import os
import sqlite3
import tempfile

import anyio

import starflow
from starflow import AesGcmCodec, CodecChain, Starflow, ZlibCodec, step, wait_for, workflow
from starflow.codec import describe

# In production the keys come from a secret store, never from source code.
OLD_KEY = AesGcmCodec.generate_key()
NEW_KEY = AesGcmCodec.generate_key()


@step
async def charge(card: str, cents: int) -> dict[str, str]:
    return {"receipt": f"R-{card[-4:]}-{cents}", "card": card}


@workflow(name="encrypted-order", version=1)
async def order(card: str) -> dict[str, str]:
    receipt = await charge(card, 1999)
    starflow.set_event("receipt", receipt)
    approval = await wait_for("approval")
    return {**receipt, "approved_by": approval["by"]}


async def main() -> None:
    path = os.path.join(tempfile.mkdtemp(), "starflow.db")
    url = f"sqlite:///{path}"
    card = "4111-1111-1111-1234"

    # Compress, then encrypt with key "k1".
    v1 = CodecChain(ZlibCodec(), AesGcmCodec(keys={"k1": OLD_KEY}, active="k1"))
    async with Starflow.open(url, codec=v1) as sf:
        run = await sf.run(order, card)
        print(f"run is {run.status}; event: {await sf.get_event(run.run_id, 'receipt')}")

    with sqlite3.connect(path) as db:
        dump = "\n".join(db.iterdump())
    print(f"card number in the database file: {card in dump}")

    # Rotation: new payloads use "k2"; "k1" stays for what it encrypted.
    v2 = CodecChain(ZlibCodec(), AesGcmCodec(keys={"k2": NEW_KEY, "k1": OLD_KEY},
                                             active="k2"))
    async with Starflow.open(url, codec=v2) as sf:
        done = await sf.signal(run.run_id, "approval", {"by": "ada"})
        print(f"after rotation: {done.status}, {await sf.result(run.run_id)}")

    # A process without the codec (a dashboard, `starflow runs show`) sees envelopes.
    async with Starflow.open(url) as sf:
        info = await sf.get_run(run.run_id)
        print(f"without the codec: input {describe(info.input_json)}, "
              f"result {describe(info.result_json)}")


if __name__ == "__main__":
    anyio.run(main)
