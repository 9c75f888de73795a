"""Compatibility: the :class:`~starflow.admin.replayer.Replayer` is product code in
:mod:`starflow.admin.replayer` (``starflow replay`` uses it); this module and
``starflow_testing`` re-export it."""

from __future__ import annotations

from starflow.admin.replayer import Replayer, ReplayResult

__all__ = ["ReplayResult", "Replayer"]
