"""The CLI with payload codecs: without the codec a value shows as ``encrypted (…)``,
never as bytes; ``--codec`` / ``$STARFLOW_CODEC`` decode it; ``starflow replay`` and
``runs export`` work with encrypted histories."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from starflow import Starflow
from starflow.codec import describe
from starflow.ui.views import fold_json

from .support import Cli

MODULE = "starflow_cli_codec_app"
SOURCE = textwrap.dedent('''
    import os

    from starflow import AesGcmCodec, Starflow, step, wait_for, workflow

    codec = AesGcmCodec(keys={"k1": bytes(range(32))}, active="k1")


    def app():
        return Starflow.open(os.environ["CLI_CODEC_DB"], codec=codec)


    def make():
        return codec


    not_a_codec = 42


    @step(name="clicodec_charge")
    async def charge(card: str) -> str:
        return "paid-" + card


    @workflow(name="clicodec_order")
    async def order(card: str) -> str:
        paid = await charge(card)
        await wait_for("go")
        return paid
''')


@pytest.fixture
def encrypted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A SQLite database with one paused run written with the module's codec; (url, id)."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("STARFLOW_CODEC", raising=False)
    module = __import__(MODULE)
    url = f"sqlite:///{tmp_path / 'enc.db'}"

    async def seed() -> str:
        async with Starflow.open(url, codec=module.codec, maintenance=False) as sf:
            handle = await sf.run(module.order, "CARD-4111")
            return handle.run_id

    return url, anyio.run(seed)


class TestShowsEncrypted:
    """Without a codec: 'encrypted (aesgcm, key k1)' where the values are."""

    def test_runs_show_and_events_without_the_codec(self, cli: Cli,
                                                    encrypted: tuple[str, str]) -> None:
        url, run_id = encrypted
        shown = cli("runs", "show", run_id, "--db", url)
        assert shown.code == 0, shown.err
        assert "encrypted (aesgcm, key k1)" in shown.out and "CARD-4111" not in shown.out
        detail = json.loads(cli("runs", "show", run_id, "--db", url, "--json").out)
        assert detail["run"]["input"] == "encrypted (aesgcm, key k1)"
        events = json.loads(cli("runs", "events", run_id, "--db", url, "--json").out)
        outputs = [e["payload"]["output"] for e in events if e["event_type"] == "node_complete"]
        assert outputs == ["encrypted (aesgcm, key k1)"]

    def test_codec_option_and_env_var_decode(self, cli: Cli, encrypted: tuple[str, str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        url, run_id = encrypted
        shown = cli("runs", "show", run_id, "--db", url, "--codec", f"{MODULE}:codec")
        assert shown.code == 0, shown.err
        assert "CARD-4111" in shown.out and "encrypted" not in shown.out
        monkeypatch.setenv("STARFLOW_CODEC", f"{MODULE}:make")  # a factory
        events = json.loads(cli("runs", "events", run_id, "--db", url, "--json").out)
        outputs = [e["payload"]["output"] for e in events if e["event_type"] == "node_complete"]
        assert outputs == ["paid-CARD-4111"]

    def test_an_apps_codec_is_used(self, cli: Cli, encrypted: tuple[str, str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
        """``--app`` naming a Starflow opened with a codec decodes (a $STARFLOW_CODEC set
        for other commands defers to it); ``--codec`` as well is refused."""
        url, run_id = encrypted
        monkeypatch.setenv("CLI_CODEC_DB", url)
        monkeypatch.setenv("STARFLOW_CODEC", f"{MODULE}:not_a_codec")
        shown = cli("runs", "show", run_id, "--app", f"{MODULE}:app")
        assert shown.code == 0, shown.err
        assert "CARD-4111" in shown.out
        assert "give one of them" in cli.fails("runs", "show", run_id, "--app",
                                               f"{MODULE}:app", "--codec", f"{MODULE}:codec",
                                               code=2)

    def test_bad_codec_specs_are_usage_errors(self, cli: Cli,
                                              encrypted: tuple[str, str]) -> None:
        url, run_id = encrypted
        assert "--codec must be MODULE:ATTR" in cli.fails(
            "runs", "show", run_id, "--db", url, "--codec", MODULE, code=2)
        assert "expected a PayloadCodec" in cli.fails(
            "runs", "show", run_id, "--db", url, "--codec", f"{MODULE}:not_a_codec", code=2)

    def test_page_folds_an_envelope_to_its_description(self) -> None:
        envelope = {"$starflow.codec": "zlib+aesgcm", "key": "k7", "data": "AAAA"}
        assert fold_json({"output": envelope}).text == \
            '{"output":"encrypted (zlib, aesgcm, key k7)"}'
        assert describe(envelope) == "encrypted (zlib, aesgcm, key k7)"


class TestReplayAndExport:
    """An export keeps the envelopes; `starflow replay` decodes them with the codec."""

    def test_export_then_replay_with_and_without_the_codec(
            self, cli: Cli, encrypted: tuple[str, str], tmp_path: Path) -> None:
        url, run_id = encrypted
        target = tmp_path / "export.json"
        exported = cli("runs", "export", run_id, "--db", url, "--out", str(target))
        assert exported.code == 0, exported.err
        assert "CARD-4111" not in target.read_text()
        ok = cli("replay", str(target), "--app", MODULE, "--codec", f"{MODULE}:codec")
        assert ok.code == 0, ok.out + ok.err
        bad = cli("replay", str(target), "--app", MODULE)
        assert bad.code == 1 and "this process cannot decode it" in bad.out + bad.err


def teardown_module() -> None:
    sys.modules.pop(MODULE, None)
