"""Payload codecs (#30): ``Starflow.open(codec=...)`` encodes every stored user value
(arguments, results, signals, updates, events, streams, session values, child runs,
pool-step jobs, schedules, debounced starts) on every durable adapter; the database
holds no plaintext; keys rotate; a missing or wrong key is a clear error naming the
run and node; the replayer and ``starflow copy`` work with it."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import starflow
from starflow import (
    AesGcmCodec,
    CodecChain,
    CodecError,
    ConfigError,
    Starflow,
    ZlibCodec,
    receive,
    session_get,
    session_set,
    step,
    wait_for,
    workflow,
)
from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.admin.copy import CopyOptions, copy_database
from starflow.admin.history import export_run
from starflow.admin.replayer import Replayer
from starflow.codec import ENVELOPE_KEY, Payloads, describe, is_encoded
from starflow_testing import WorkflowEnvironment, capture_logs
from tests.conftest import POSTGRES_URL

K1 = bytes(range(32))
K2 = bytes(range(100, 132))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def aes(active: str = "k1", **keys: bytes) -> AesGcmCodec:
    return AesGcmCodec(keys=keys or {"k1": K1}, active=active)


def base_adapter(adapter: WorkflowStateAdapter) -> WorkflowStateAdapter:
    while isinstance(adapter, DelegatingAdapter):
        adapter = adapter.inner
    return adapter


async def stored_text(adapter: WorkflowStateAdapter) -> str:
    """Every row of every table, as the database holds it (read with its own driver)."""
    base = base_adapter(adapter)
    if type(base).__name__ == "PostgresWorkflowStateAdapter":
        import asyncpg

        conn = await asyncpg.connect(POSTGRES_URL)
        try:
            tables = [r[0] for r in await conn.fetch(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
            rows = []
            for table in tables:
                rows += [r[0] for r in await conn.fetch(
                    f'SELECT row_to_json(t)::text FROM "{table}" t')]
            return "\n".join(rows)
        finally:
            await conn.close()
    db = base._db  # type: ignore[attr-defined]  # aiosqlite: memory:// and sqlite files
    return "\n".join([line async for line in db.iterdump()])


class _KeepOpen(DelegatingAdapter):
    """One database opened once, seen by several apps in turn (a private memory://
    database lives as long as its adapter): closing an app leaves it open."""

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass


@pytest.fixture
async def database(db_url: str, workspace_id: str) -> AsyncIterator[WorkflowStateAdapter]:
    """The test's database, for apps opened on it one after another with other codecs."""
    inner = adapter_from_url(db_url, workspace_id=workspace_id)
    async with inner:
        yield _KeepOpen(inner)


def app(database: WorkflowStateAdapter, codec: Any = None) -> Starflow:
    return Starflow.open(adapter=database, codec=codec, maintenance=False)


# -- the codecs themselves ---------------------------------------------------------------


class TestCodecs:
    """The codecs and the envelope, without a database."""

    def test_chain_round_trips_and_hides_the_plaintext(self) -> None:
        """zlib then AES-GCM: the envelope names both and the key, holds no plaintext."""
        payloads = Payloads(CodecChain(ZlibCodec(), aes()))
        sealed = payloads.seal({"card": "4111-SECRET"})
        assert sealed[ENVELOPE_KEY] == "zlib+aesgcm" and sealed["key"] == "k1"
        assert "SECRET" not in msgspec.json.encode(sealed).decode()
        assert payloads.open(sealed) == {"card": "4111-SECRET"}
        assert describe(sealed) == "encrypted (zlib, aesgcm, key k1)"
        assert payloads.open({"plain": 1}) == {"plain": 1}  # written before the codec

    def test_zlib_alone_compresses(self) -> None:
        payloads = Payloads(ZlibCodec(level=9))
        value = {"text": "x" * 10_000}
        sealed = payloads.seal(value)
        assert len(sealed["data"]) < 200 and "key" not in sealed
        assert describe(sealed) == "encoded (zlib)"
        assert payloads.open(sealed) == value

    def test_decoding_follows_the_envelope_not_the_configuration(self) -> None:
        """A payload written by aesgcm alone opens under zlib+aesgcm (codecs can be added)."""
        old = Payloads(aes()).seal([1, 2, 3])
        assert Payloads(CodecChain(ZlibCodec(), aes())).open(old) == [1, 2, 3]
        with pytest.raises(CodecError, match="lacks 'aesgcm'"):
            Payloads(ZlibCodec()).open(old, run_id="r-1", node_id="step:a#1")

    def test_bad_codecs_are_refused_with_every_problem(self) -> None:
        with pytest.raises(ConfigError) as info:
            AesGcmCodec(keys={"k1": b"short", "": K1}, active="k9")
        message = str(info.value)
        assert "'k1' must be 16, 24 or 32 bytes, got 5" in message
        assert "key id ''" in message and "active key 'k9'" in message

        class NoName:
            name = "a+b"

            def encode(self, data: bytes) -> bytes:
                return data

            def decode(self, data: bytes) -> bytes:
                return data

        with pytest.raises(ConfigError, match="without '\\+'"):
            Payloads(NoName())
        with pytest.raises(ConfigError, match="encode"):
            Starflow.open("memory://", codec=object())  # type: ignore[arg-type]

    def test_altered_or_foreign_data_is_refused(self) -> None:
        """A flipped ciphertext byte, bad base64, data zlib cannot read: CodecError
        naming the run and node, never a wrong value."""
        payloads = Payloads(CodecChain(ZlibCodec(), aes()))
        sealed = payloads.seal("value")
        raw = bytearray(base64.b64decode(sealed["data"]))
        raw[-1] ^= 1
        altered = {**sealed, "data": base64.b64encode(bytes(raw)).decode()}
        with pytest.raises(CodecError, match="the data was altered") as info:
            payloads.open(altered, what="recorded output", run_id="r-1", node_id="step:a#1")
        assert (info.value.run_id, info.value.node_id) == ("r-1", "step:a#1")
        assert "recorded output of run r-1 (node step:a#1)" in str(info.value)
        with pytest.raises(CodecError, match="cannot be decoded"):
            payloads.open({**sealed, "data": "not base64!"})
        zipped = Payloads(ZlibCodec())
        with pytest.raises(CodecError, match="zlib cannot decompress"):
            zipped.open({ENVELOPE_KEY: "zlib", "data": base64.b64encode(b"plain").decode()})

    def test_keys_never_show_in_repr(self) -> None:
        assert repr(aes()) == "AesGcmCodec(keys=['k1'], active='k1')"


# -- every payload kind, on every adapter ------------------------------------------------


class TestEveryPayloadKind:
    """Each stored user value is encrypted at rest and decoded for the workflow."""

    async def test_workflow_values_round_trip_and_are_not_stored_in_plaintext(
            self, db_url: str, workspace_id: str) -> None:
        """Arguments, step arguments and results, a signal, an update and its answer, an
        event, a stream, session values, a child run's arguments and result, the run's
        result: all decode for the workflow and the caller; none is in the database."""
        tag = uuid.uuid4().hex[:8]
        secret = {k: f"{k}-{tag}-SECRET" for k in (
            "arg", "steparg", "stepout", "signal", "update", "reply", "event", "stream",
            "session", "childarg", "childout", "result", "appsession")}

        @step(name=unique("charge"))
        async def charge(card: str) -> dict[str, str]:
            assert card == secret["steparg"]
            return {"receipt": secret["stepout"]}

        @workflow(name=unique("child"))
        async def child(x: str) -> str:
            assert x == secret["childarg"]
            return secret["childout"]

        @workflow(name=unique("order"))
        async def order(card: str) -> dict[str, Any]:
            assert card == secret["arg"]
            receipt = await charge(secret["steparg"])
            starflow.set_event("status", {"e": secret["event"]})
            starflow.write_stream("log", secret["stream"])
            starflow.close_stream("log")
            await session_set("s1", "k", secret["session"])
            seen = await session_get("s1", "k")
            req = await receive("ask")
            await req.reply(secret["reply"])
            approval = await wait_for("approval")
            from_child = await child(secret["childarg"])
            return {"receipt": receipt, "approval": approval, "update": req.payload,
                    "session": seen, "child": from_child, "r": secret["result"]}

        codec = CodecChain(ZlibCodec(), aes())
        async with WorkflowEnvironment(db_url, workspace_id=workspace_id,
                                       codec=codec) as env:
            handle = await env.start(order, secret["arg"])
            run_id = handle.run_id
            await env.run_until_idle()
            assert await env.app.update(run_id, "ask", {"q": secret["update"]}) \
                == secret["reply"]
            await env.signal(run_id, "approval", {"ok": secret["signal"]})
            result = await env.result(run_id)
            await env.app.session_set("s2", "k", secret["appsession"])
            assert await env.app.session_get("s2", "k") == secret["appsession"]
            assert result == {"receipt": {"receipt": secret["stepout"]},
                              "approval": {"ok": secret["signal"]},
                              "update": {"q": secret["update"]},
                              "session": secret["session"], "child": secret["childout"],
                              "r": secret["result"]}
            assert await env.app.get_event(run_id, "status") == {"e": secret["event"]}
            assert [v async for v in env.app.read_stream(run_id, "log")] == [secret["stream"]]
            # The raw rows hold envelopes where the values were.
            raw = base_adapter(env.adapter)
            run = await raw.get_run(run_id)
            assert run is not None and is_encoded(run.input_json)
            assert is_encoded(run.result_json) and run.result_json["key"] == "k1"
            outputs = [e.payload_json["output"] for e in await raw.list_events(run_id)
                       if e.event_type == "node_complete"]
            assert outputs and all(is_encoded(o) or o is None for o in outputs), outputs
            dump = await stored_text(env.adapter)
        assert run_id in dump  # the rows are there...
        leaked = [k for k, v in secret.items() if v in dump]
        assert not leaked, f"stored in plaintext: {leaked}"  # ...their values are not

    async def test_queued_signal_is_stored_encoded(self, db_url: str,
                                                   workspace_id: str) -> None:
        """A signal sent before the run waits for it sits in the inbox encoded, and is
        delivered decoded when the run gets there."""
        tag = uuid.uuid4().hex[:8]

        @workflow(name=unique("two_waits"))
        async def two_waits() -> list[Any]:
            return [await wait_for("first"), await wait_for("second")]

        async with Starflow.open(db_url, workspace_id=workspace_id, codec=aes(),
                                 maintenance=False) as sf:
            handle = await sf.run(two_waits)
            await sf.signal(handle.run_id, "second", {"early": f"early-{tag}"})
            raw = await base_adapter(sf.adapter).find_signal(handle.run_id, "second")
            assert raw is not None and is_encoded(raw.payload)
            assert f"early-{tag}" not in await stored_text(sf.adapter)
            done = await sf.signal(handle.run_id, "first", 1)
            assert done.status == "success"
            assert await sf.result(handle.run_id) == [1, {"early": f"early-{tag}"}]

    async def test_pool_step_jobs_and_schedules(self, db_url: str, workspace_id: str) -> None:
        """A pool step's job (arguments, result) and a schedule's arguments are stored
        encoded; the job worker and a triggered schedule run see the values."""
        tag = uuid.uuid4().hex[:8]
        pool = unique("pool")

        @step(name=unique("render"), pool=pool)
        async def render(x: str) -> str:
            assert x == f"jobarg-{tag}"
            return f"jobout-{tag}"

        @workflow(name=unique("pooled"))
        async def pooled(x: str) -> str:
            return await render(x)

        async with Starflow.open(db_url, workspace_id=workspace_id, codec=aes(),
                                 maintenance=False) as sf:
            handle = await sf.run(pooled, f"jobarg-{tag}")
            assert handle.status == "paused"
            assert await sf.job_worker(pool).work_once() == 1
            assert await sf.result(handle.run_id) == f"jobout-{tag}"
            (job,) = await sf.adapter.list_jobs(run_id=handle.run_id)
            assert (job.input, job.result) == ({"args": [f"jobarg-{tag}"], "kwargs": {}},
                                               f"jobout-{tag}")
            (raw_job,) = await base_adapter(sf.adapter).list_jobs(run_id=handle.run_id)
            assert is_encoded(raw_job.input) and is_encoded(raw_job.result)

            sid = unique("sched")
            record = await sf.schedule(sid, pooled, f"schedarg-{tag}", cron="0 * * * *")
            assert record.input == {"args": [f"schedarg-{tag}"], "kwargs": {}}
            raw_sched = await base_adapter(sf.adapter).get_schedule(sid)
            assert raw_sched is not None and is_encoded(raw_sched.input)
            started = await sf.trigger_schedule(sid)
            run = await sf.get_run(started.run_id)
            assert run.input_json == {"args": [f"schedarg-{tag}"], "kwargs": {}}
            dump = await stored_text(sf.adapter)
        for plain in (f"jobarg-{tag}", f"jobout-{tag}", f"schedarg-{tag}"):
            assert plain not in dump, plain

    async def test_debounced_start_rearms_with_encoded_arguments(
            self, db_url: str, workspace_id: str) -> None:
        tag = uuid.uuid4().hex[:8]

        @workflow(name=unique("debounced"))
        async def debounced(x: str) -> str:
            return x

        async with Starflow.open(db_url, workspace_id=workspace_id, codec=aes(),
                                 maintenance=False) as sf:
            opts = sf.options(debounce=timedelta(minutes=5), debounce_key="d")
            first = await opts.start(debounced, f"first-{tag}")
            second = await opts.start(debounced, f"second-{tag}")
            assert second.run_id == first.run_id
            run = await sf.get_run(first.run_id)
            assert run.input_json == {"args": [f"second-{tag}"], "kwargs": {}}
            raw = await base_adapter(sf.adapter).get_run(first.run_id)
            assert raw is not None and is_encoded(raw.input_json)
            dump = await stored_text(sf.adapter)
        assert f"second-{tag}" not in dump and f"first-{tag}" not in dump


# -- keys ------------------------------------------------------------------------------


def _signal_workflow() -> Any:
    @step(name=unique("secret"))
    async def secret_step(x: str) -> str:
        return f"out-{x}"

    @workflow(name=unique("rotating"))
    async def rotating(x: str) -> dict[str, Any]:
        first = await secret_step(x)
        got = await wait_for("go")
        return {"first": first, "got": got}

    return rotating


class TestKeys:
    """Rotation, and what a process with a missing or wrong key sees."""

    async def test_rotation_old_payloads_decode_new_ones_use_the_new_key(
            self, database: WorkflowStateAdapter) -> None:
        """A run paused under k1 resumes under {k2 active, k1}: its replayed step output
        (k1) decodes, the signal and result are written with k2."""
        wf = _signal_workflow()
        async with app(database, aes("k1", k1=K1)) as sf:
            handle = await sf.run(wf, "a")
            assert handle.status == "paused"
        rotated = aes("k2", k2=K2, k1=K1)
        async with app(database, rotated) as sf:
            done = await sf.signal(handle.run_id, "go", {"n": 1})
            assert done.status == "success"
            assert await sf.result(handle.run_id) == {"first": "out-a", "got": {"n": 1}}
            raw = base_adapter(sf.adapter)
            run = await raw.get_run(handle.run_id)
            assert run is not None
            assert run.input_json["key"] == "k1" and run.result_json["key"] == "k2"
            keys = [e.payload_json["output"]["key"] for e in await raw.list_events(handle.run_id)
                    if e.event_type == "node_complete"]
            assert keys[0] == "k1" and keys[-1] == "k2"

    async def test_missing_key_names_the_run_node_and_key(
            self, database: WorkflowStateAdapter) -> None:
        wf = _signal_workflow()
        async with app(database, aes("k1", k1=K1)) as sf:
            handle = await sf.run(wf, "a")
        async with app(database, aes("k2", k2=K2)) as sf:
            with pytest.raises(CodecError) as info:
                await sf.events(handle.run_id)
            assert info.value.run_id == handle.run_id
            assert info.value.node_id is not None and info.value.node_id.startswith("step:")
            assert "key 'k1', which this AesGcmCodec does not have" in str(info.value)
            assert handle.run_id in str(info.value)
            with pytest.raises(CodecError, match="arguments of run"):
                await sf.get_run(handle.run_id)

    async def test_wrong_key_under_the_same_id_is_refused(
            self, database: WorkflowStateAdapter) -> None:
        wf = _signal_workflow()
        async with app(database, aes("k1", k1=K1)) as sf:
            handle = await sf.run(wf, "a")
        async with app(database, aes("k1", k1=K2)) as sf:
            with pytest.raises(CodecError, match="cannot be decrypted with key 'k1'") as info:
                await sf.signal(handle.run_id, "go", 1)
            assert info.value.run_id == handle.run_id

    async def test_worker_without_the_key_hands_the_run_back(
            self, database: WorkflowStateAdapter) -> None:
        """A worker whose codec lacks the run's key claims it, logs why and releases it
        (not failed, not stranded until the sweep); a worker with the key runs it."""
        wf = _signal_workflow()
        async with app(database, aes("k1", k1=K1)) as sf:
            handle = await sf.start(wf, "queued")
        async with app(database, aes("k2", k2=K2)) as sf:
            worker = sf.worker()
            with capture_logs() as logs:
                async with anyio.create_task_group() as tg:
                    assert await worker.claim_once(tg) == 1
            run = await base_adapter(sf.adapter).get_run(handle.run_id)
            assert run is not None
            assert (run.status, run.claim_state, run.leased_by, run.error) == (
                "queued", "queued", None, None)
            assert worker.released == 1
            assert any(e["event"] == "claimed a run this codec cannot decode"
                       and "key 'k1'" in e["error"] for e in logs)
            assert any(e["event"].startswith("claimed a run this process cannot execute")
                       and e["run_id"] == handle.run_id for e in logs)
        async with app(database, aes("k2", k2=K2, k1=K1)) as sf:
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 1
            run = await sf.get_run(handle.run_id)
            assert run.status == "paused" and run.input_json == {"args": ["queued"],
                                                                 "kwargs": {}}

    async def test_no_codec_sees_envelopes_and_refuses_to_use_them(
            self, database: WorkflowStateAdapter) -> None:
        """Without a codec the rows read as envelopes (shown as 'encrypted'), and using one
        as a value (sf.result) is a CodecError naming the run, not a wrong value."""
        wf = _signal_workflow()
        async with app(database, aes()) as sf:
            handle = await sf.run(wf, "a")
            await sf.signal(handle.run_id, "go", 2)
        async with app(database) as sf:
            run = await sf.get_run(handle.run_id)
            assert run.status == "success" and describe(run.result_json) \
                == "encrypted (aesgcm, key k1)"
            with pytest.raises(CodecError, match="this process cannot decode it") as info:
                await sf.result(handle.run_id)
            assert info.value.run_id == handle.run_id


# -- replay and copy -----------------------------------------------------------------------


class TestReplayAndCopy:
    """The replayer and ``starflow copy`` with encoded histories."""

    async def test_replayer_decodes_with_the_codec(self, db_url: str,
                                                   workspace_id: str) -> None:
        """From a raw source and from an export: ok with the codec, a failed replay naming
        the codec problem without it (never a false ok)."""
        wf = _signal_workflow()
        async with Starflow.open(db_url, workspace_id=workspace_id, codec=aes(),
                                 maintenance=False) as sf:
            handle = await sf.run(wf, "a")
            via_app = await Replayer(workflows=[wf]).replay_run(sf, handle.run_id)
            assert via_app.ok and via_app.outcome == "paused"
            exported = await export_run(base_adapter(sf.adapter), handle.run_id)
        assert "out-a" not in msgspec.json.encode(exported).decode()
        good = await Replayer(workflows=[wf], codec=aes()).replay_history(exported)
        assert good.ok and good.outcome == "paused", good.error
        bare = await Replayer(workflows=[wf]).replay_history(exported)
        assert not bare.ok and isinstance(bare.error, CodecError)
        wrong = await Replayer(workflows=[wf], codec=aes("k1", k1=K2)).replay_history(exported)
        assert not wrong.ok and isinstance(wrong.error, CodecError)
        assert wrong.error.run_id == handle.run_id

    async def test_copied_encrypted_run_still_decodes(self, tmp_path: Path) -> None:
        """``starflow copy`` moves the envelopes verbatim: the target holds no plaintext,
        and opened with the key, the copied run's values and result are there."""
        wf = _signal_workflow()
        src, dst = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
        async with Starflow.open(src, codec=aes(), maintenance=False) as sf:
            handle = await sf.run(wf, "copied")
        report = await copy_database(CopyOptions(source=src, target=dst, all_tenants=True))
        assert report.ok and report.runs == 1
        async with Starflow.open(dst, maintenance=False) as sf:
            assert "out-copied" not in await stored_text(sf.adapter)
        async with Starflow.open(dst, codec=aes(), maintenance=False) as sf:
            done = await sf.signal(handle.run_id, "go", "later")
            assert done.status == "success"
            assert await sf.result(handle.run_id) == {"first": "out-copied", "got": "later"}


async def test_warm_mirror_gets_envelopes(workspace_id: str) -> None:
    """Above the mirror: the warm-tier outbox (stored in the cold database) holds no
    plaintext either."""
    @workflow(name=unique("warm"))
    async def warm_wf(x: str) -> str:
        starflow.set_event("e", f"event-{x}")
        return f"result-{x}"

    async with Starflow.open("memory://", workspace_id=workspace_id, warm="memory://",
                             codec=aes(), maintenance=False) as sf:
        handle = await sf.run(warm_wf, "W4RM")
        assert await sf.result(handle.run_id) == "result-W4RM"
        dump = await stored_text(sf.adapter)
    assert "mirror_outbox" in dump and "W4RM" not in dump


async def test_sync_facade_takes_a_codec(tmp_path: Path) -> None:
    from starflow import sync

    @workflow(name=unique("syncwf"))
    async def syncwf(x: str) -> str:
        return x * 2

    url = f"sqlite:///{tmp_path / 's.db'}"

    def go() -> str:
        with sync.Starflow.open(url, codec=aes()) as sf:
            return str(sf.result(sf.run(syncwf, "ab").run_id))

    assert await anyio.to_thread.run_sync(go) == "abab"
    async with Starflow.open(url, maintenance=False) as sf:
        assert "abab" not in await stored_text(sf.adapter)
