"""The public API is exactly what __all__ lists, sorted; nothing leaks."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module_name", ["starflow", "starflow_testing", "starflow.sync"])
def test_all_is_sorted_and_importable(module_name: str) -> None:
    """__all__ is sorted, has no duplicates, and every name exists."""
    module = importlib.import_module(module_name)
    names = list(module.__all__)
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert hasattr(module, name), name


def test_starflow_core_names_are_public() -> None:
    """The names DESIGN.md fixes are all exported."""
    import starflow

    required = {"workflow", "step", "wait_for", "sleep", "now", "context", "Starflow",
                "StarflowConfig", "RetryPolicy", "WorkflowContext", "RunHandle", "RunInfo",
                "RunEvent", "StarflowError", "NonDeterminismError", "WaitTimeout",
                "LeaseLostError", "ReservedKeyError", "SerializationError", "InvalidWakeToken",
                "RunNotFound", "RunFinished", "WorkflowFailed", "PruneReport",
                "start_child", "ChildHandle", "WorkflowTimeout"}
    assert required <= set(starflow.__all__)


def test_errors_derive_from_starflow_error() -> None:
    """Every exported exception is a StarflowError."""
    import starflow

    for name in starflow.__all__:
        obj = getattr(starflow, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, starflow.StarflowError), name


def test_importing_starflow_does_not_import_drivers() -> None:
    """Drivers load lazily: a fresh interpreter importing starflow has no asyncpg/redis."""
    import subprocess
    import sys

    code = ("import sys, starflow; "
            "print(sorted(m for m in ('asyncpg', 'aiosqlite', 'redis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_error_classes_are_pinned_and_drawn() -> None:
    """The exported errors are exactly these (and the harness's RunnerKilled), each drawn
    in the errors.py tree and docs."""
    import re
    from pathlib import Path

    import starflow
    import starflow.errors

    errors = sorted(name for name in starflow.__all__
                    if isinstance(getattr(starflow, name), type)
                    and issubclass(getattr(starflow, name), BaseException))
    assert errors == [
        "CallerTransactionError", "CodecError", "ConcurrentWaits", "ConfigError",
        "CopyRefused", "DuplicateRun", "ForeignConnection", "InvalidArgument",
        "InvalidWakeToken",
        "LeaseLostError", "NodeNotInHistory",
        "NonDeterminismError", "NotInTransaction", "OutsideWorkflow", "ReservedKeyError",
        "ResultTimeout",
        "RunCancelled", "RunFinished", "RunIdConflict", "RunNotEnded", "RunNotFound",
        "ScheduleNotFound", "SerializationError", "StarflowError", "StepFailed",
        "StepTimeout", "StorageError", "StreamClosed", "TooManyRuns",
        "TransactionalStartUnsupported", "UnexpectedSignal",
        "UpdateRejected", "WaitTimeout", "WarmTierError", "WorkflowDefinitionError",
        "WorkflowFailed", "WorkflowTimeout",
    ]
    # RunnerKilled is the test harness's (a simulated SIGKILL): starflow_testing exports it.
    import starflow_testing

    assert sorted(starflow.errors.__all__) == sorted([*errors, "RunnerKilled"])
    assert starflow_testing.RunnerKilled is starflow.errors.RunnerKilled
    page = (Path(__file__).parent.parent / "docs" / "errors.md").read_text()
    tree = starflow.errors.__doc__ or ""
    for name in starflow.errors.__all__:
        drawn = re.compile(rf"^[\s│├└─]*{name}\b", re.MULTILINE)
        assert drawn.search(tree), f"{name} is not drawn in the errors.py docstring"
        assert drawn.search(page), f"{name} is not drawn in docs/errors.md"
        assert f"\n## {name}\n" in page, f"docs/errors.md has no section for {name}"


def test_sync_facade_has_the_async_methods() -> None:
    """starflow.sync.Starflow has every public method of starflow.Starflow, same names."""
    import starflow
    from starflow import sync

    assert sync.__all__ == ["RunOptions", "Starflow", "SyncWorker"]
    public = {n for n in dir(starflow.Starflow) if not n.startswith("_")}
    # Not offered: the adapter/runner internals, and job workers (run them as processes).
    internal = {"adapter", "runner", "clock", "warm", "job_worker"}
    missing = sorted(public - internal - set(dir(sync.Starflow)))
    assert not missing, f"starflow.sync.Starflow lacks {missing}"
