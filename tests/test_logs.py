"""starflow logs like a library: stdlib logging, quiet unless the host asks (starflow.logs)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import structlog

from starflow import logs
from starflow.logs import RunContextFilter, bound, configure_logging, get_logger

#: A user's program: a step that fails once (retried, logged at info) and a
#: warning from starflow's own logger. ``{setup}`` is the host's logging setup.
PROGRAM = textwrap.dedent("""
    import anyio
    from datetime import timedelta
    {setup}
    from starflow import RetryPolicy, step, workflow
    from starflow.logs import get_logger
    from starflow_testing import WorkflowEnvironment

    calls = []

    @step(retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(seconds=5)))
    async def flaky() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("transient")
        return 1

    @workflow(name="logs-flow")
    async def flow() -> int:
        return await flaky()

    async def main() -> None:
        async with WorkflowEnvironment() as env:
            handle = await env.run(flow)
            assert handle.status == "success", handle
        get_logger("starflow.test").warning("a warning", run_id="r-1")

    anyio.run(main)
""")


def _run(setup: str) -> subprocess.CompletedProcess[str]:
    env_code = PROGRAM.format(setup=textwrap.indent(textwrap.dedent(setup), ""))
    return subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True,
                          timeout=60, check=False,
                          env={k: v for k, v in __import__("os").environ.items()
                               if k not in ("STARFLOW_LOG_LEVEL", "NO_COLOR")})


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the starflow and root loggers back as they were (configure_logging changes them)."""
    sf, root = logging.getLogger("starflow"), logging.getLogger()
    saved = (list(sf.handlers), sf.level, sf.propagate, list(root.handlers), root.level,
             dict(logs._installed))
    try:
        yield
    finally:
        sf.handlers[:], sf.level, sf.propagate = saved[0], saved[1], saved[2]
        root.handlers[:], root.level = saved[3], saved[4]
        logs._installed.clear()
        logs._installed.update(saved[5])


class TestAsALibrary:
    """Without the host configuring logging nothing is written; with it, its setup is used."""

    def test_package_logger_has_only_a_null_handler(self) -> None:
        """Importing starflow adds a NullHandler to `starflow` and sets no level."""
        proc = subprocess.run(
            [sys.executable, "-c",
             "import logging, starflow\n"
             "lg = logging.getLogger('starflow')\n"
             "print([type(h).__name__ for h in lg.handlers], lg.level, lg.propagate,"
             " logging.getLogger().handlers)"],
            capture_output=True, text=True, timeout=60, check=True,
            env={k: v for k, v in __import__("os").environ.items()
                 if k != "STARFLOW_LOG_LEVEL"})
        assert proc.stdout.strip() == "['NullHandler'] 0 True []"

    @pytest.mark.slow
    def test_silent_without_configuration(self) -> None:
        """A run with a retried step and a starflow warning prints nothing, anywhere."""
        proc = _run("")
        assert proc.returncode == 0, proc.stderr
        assert (proc.stdout, proc.stderr) == ("", "")

    @pytest.mark.slow
    def test_host_basic_config_is_respected(self) -> None:
        """basicConfig(level=INFO) shows starflow's lines (retries warn) in the host's format."""
        proc = _run("""
            import logging, sys
            logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                                format="HOST %(levelname)s %(name)s %(message)s")
        """)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == ""
        lines = proc.stderr.splitlines()
        retry = [ln for ln in lines if "step failed; retrying" in ln]
        assert len(retry) == 1, proc.stderr
        assert retry[0].startswith("HOST WARNING starflow.engine step failed; retrying run_id=")
        assert "node_id=step:flaky#1" in retry[0] and "attempt=1" in retry[0]
        assert any(ln.startswith("HOST WARNING starflow.test") and "run_id=r-1" in ln
                   for ln in lines)
        assert "\x1b[" not in proc.stderr

    def test_fields_are_record_attributes(self) -> None:
        """run_id, node_id and the event's fields are attributes of the LogRecord."""
        records: list[logging.LogRecord] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                records.append(record)

        lg = logging.getLogger("starflow")
        handler, level = Keep(), lg.level
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
        try:
            with bound(run_id="r-9", node_id="step:x#1"):
                get_logger("starflow.test").info("hello", attempt=2, name="clash")
        finally:
            lg.removeHandler(handler)
            lg.setLevel(level)
        (record,) = records
        assert record.name == "starflow.test" and record.levelno == logging.INFO
        assert (record.run_id, record.node_id, record.attempt) == ("r-9", "step:x#1", 2)  # type: ignore[attr-defined]
        assert record.name_ == "clash"  # type: ignore[attr-defined]  # 'name' is LogRecord's
        assert record.starflow == {"run_id": "r-9", "node_id": "step:x#1",  # type: ignore[attr-defined]
                                   "attempt": 2, "name": "clash"}
        assert record.getMessage() == "hello run_id=r-9 node_id=step:x#1 attempt=2 name=clash"

    def test_run_context_filter_tags_the_hosts_records(self) -> None:
        """A host handler with RunContextFilter sees run_id/node_id on its own records."""
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(message)s %(run_id)s %(node_id)s"))
        handler.addFilter(RunContextFilter())
        app = logging.getLogger("tests.host-app")
        app.addHandler(handler)
        app.propagate = False
        try:
            with bound(run_id="r-2", node_id="step:y#1"):
                app.warning("in a step")
        finally:
            app.removeHandler(handler)
        assert stream.getvalue() == "in a step r-2 step:y#1\n"


@pytest.mark.usefixtures("restore_logging")
class TestConfigureLogging:
    """configure_logging renders with structlog without touching the host's structlog setup."""

    def test_keeps_the_hosts_structlog_configuration(self) -> None:
        """structlog's processors and logger factory are what the host set."""
        def mine(_: object, __: str, event_dict: structlog.typing.EventDict
                 ) -> structlog.typing.EventDict:
            return event_dict

        structlog.configure(processors=[mine, structlog.processors.KeyValueRenderer()])
        try:
            before = structlog.get_config()
            configure_logging("info", stream=io.StringIO())
            assert structlog.get_config() == before
        finally:
            structlog.reset_defaults()

    def test_no_colours_into_a_pipe(self) -> None:
        """A stream that is not a terminal gets plain text; colors=True forces them."""
        plain, coloured = io.StringIO(), io.StringIO()
        configure_logging("info", stream=plain)
        get_logger("starflow.test").warning("hello", run_id="r-1")
        configure_logging("info", stream=coloured, colors=True)
        get_logger("starflow.test").warning("hello", run_id="r-1")
        assert "hello" in plain.getvalue() and "run_id=r-1" in plain.getvalue()
        assert "\x1b[" not in plain.getvalue()
        assert "\x1b[" in coloured.getvalue()
        assert "hello" not in plain.getvalue().split("\n", 1)[1]  # one handler, replaced

    def test_json_lines_carry_the_fields(self) -> None:
        """json=True writes one JSON object per record with event, level and fields."""
        out = io.StringIO()
        configure_logging("debug", json=True, stream=out)
        with bound(run_id="r-3"):
            get_logger("starflow.engine").debug("run started", workflow="w")
        (line,) = out.getvalue().splitlines()
        entry = json.loads(line)
        assert {k: entry[k] for k in ("event", "level", "logger", "run_id", "workflow")} == {
            "event": "run started", "level": "debug", "logger": "starflow.engine",
            "run_id": "r-3", "workflow": "w"}

    def test_level_filters(self) -> None:
        """Records below the chosen level are not written."""
        out = io.StringIO()
        configure_logging("warning", stream=out)
        get_logger("starflow.test").info("quiet")
        assert out.getvalue() == ""
        assert logs.get_level() == logging.WARNING

    def test_unknown_level(self) -> None:
        """A bad level name is a ValueError naming the choices."""
        with pytest.raises(ValueError, match="unknown log level 'loud'"):
            configure_logging("loud", stream=io.StringIO())
