"""Commands reach their handler by type (``Command.send_to``), not by a name looked up."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from typing import Any

import pytest

from starflow.adapters import units
from starflow.adapters.null import NullWorkflowStateAdapter
from starflow.adapters.units import Command, CommandHandler, ExpireSessionVars, PruneRuns

COMMANDS = sorted((c for _, c in inspect.getmembers(units, inspect.isclass)
                   if issubclass(c, Command) and c is not Command), key=lambda c: c.__name__)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _Recorder:
    """Answers any handler call with the handler's name (not a CommandHandler)."""

    def __getattr__(self, name: str) -> Any:
        return lambda command: (name, command)


class TestDispatch:
    """Every command names exactly its own handler, and the handler base declares it."""

    def test_the_commands_are_found(self) -> None:
        assert {c.__name__ for c in COMMANDS} >= {"ClaimRuns", "PruneRuns", "SweepLeases"}

    @pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.__name__)
    def test_each_command_sends_itself_to_its_handler(self, command: type[Command[Any]]
                                                      ) -> None:
        assert "send_to" in vars(command), f"{command.__name__} does not define send_to"
        instance = object.__new__(command)  # send_to reads no field
        answer: Any = instance.send_to(_Recorder())  # type: ignore[arg-type]
        name, sent = answer
        assert name == "_" + command.method
        assert sent is instance

    def test_the_handler_base_declares_one_method_per_command(self) -> None:
        assert CommandHandler.__abstractmethods__ == {"_" + c.method for c in COMMANDS}


class TestPerform:
    """``perform`` awaits the handler the command names."""

    async def test_a_handler_answers(self) -> None:
        adapter = NullWorkflowStateAdapter()
        assert await adapter.perform(ExpireSessionVars(now=NOW)) == 0

    async def test_a_command_a_handler_cannot_serve_says_so(self) -> None:
        now = NOW
        with pytest.raises(NotImplementedError, match="cannot perform PruneRuns"):
            await NullWorkflowStateAdapter().perform(PruneRuns(ended_before=now, now=now))
