"""HMAC wake tokens: one per wait, tokens for the next wait, rejections write nothing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import starflow
from starflow import InvalidWakeToken, Starflow, StarflowConfig, step, wait_for, workflow
from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.records import SignalRecord
from starflow.tokens import Keyring, WakeClaims, redact_wake_tokens
from starflow_testing import FakeClock

from .conftest import KEYS, unique

outbox: list[str] = []


@step(name="tok_request_approval")
async def request_approval(order_id: str) -> None:
    """Hands the token of the next wait to an "external system"."""
    outbox.append(starflow.wake_token("approval"))


async def snapshot(sf: Starflow, run_id: str) -> Any:
    """Everything a resume could write for this run."""
    a = sf.adapter
    return (await a.get_run(run_id), await a.list_events(run_id), await a.list_waits(run_id),
            await a.find_signal(run_id, "approval"), await a.find_signal(run_id, "first"))


def approval_workflow() -> Any:
    @workflow(name=unique("approval"))
    async def wf(order_id: str) -> str:
        await request_approval(order_id)
        decision = await wait_for("approval")
        return f"{order_id}:{decision['ok']}"

    return wf


class TestTokens:
    """Each wait has a token; the run_paused event carries it; redaction hides it."""

    async def test_paused_run_carries_its_token(self, sf: Starflow) -> None:
        wf = approval_workflow()
        h = await sf.run(wf, "o-1")
        assert h.status == "paused" and h.wake_token is not None
        assert h.wake_token.startswith("sfw1.k1.")
        paused = [e for e in await sf.events(h.run_id) if e.event_type == "run_paused"]
        assert paused[-1].payload["wake_token"] == h.wake_token
        redacted = redact_wake_tokens(paused[-1].payload)
        assert redacted["wake_token"] == "[redacted]" and redacted["node_id"] == "wait:approval#1"

    async def test_token_handed_out_before_the_wait_resumes_it(self, sf: Starflow) -> None:
        """A step sends starflow.wake_token("approval"); the external system resumes with it."""
        outbox.clear()
        wf = approval_workflow()
        h = await sf.run(wf, "o-2")
        assert h.status == "paused" and len(outbox) == 1
        done = await sf.resume(outbox[0], {"ok": True})
        assert (done.status, done.result) == ("success", "o-2:True")

    async def test_early_resume_is_kept_until_the_wait(self, sf: Starflow) -> None:
        """A resume that beats the run to its wait is delivered there, once."""
        outbox.clear()

        @workflow(name=unique("early"))
        async def wf() -> str:
            await request_approval("o")
            first = await wait_for("first")
            decision = await wait_for("approval")
            return f"{first}:{decision['ok']}"

        h = await sf.run(wf)
        token = outbox[0]
        kept = await sf.resume(token, {"ok": False})
        assert kept.status == "paused" and kept.waiting_for == "first"
        before = await snapshot(sf, h.run_id)
        with pytest.raises(InvalidWakeToken) as err:
            await sf.resume(token, {"ok": True})
        assert err.value.reason == "already_used"
        assert await snapshot(sf, h.run_id) == before
        done = await sf.signal(h.run_id, "first", "f")
        assert (done.status, done.result) == ("success", "f:False")


class _BothPastTheCheck(DelegatingAdapter):
    """Once armed, holds the next two ``find_signal`` reads until both are made: two
    early resumes of one token are both past the inbox check before either writes."""

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(inner)
        self.reads: int | None = None  # None: not armed
        self.both = anyio.Event()

    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        found = await self.inner.find_signal(run_id, event)
        if self.reads is not None and self.reads < 2:
            self.reads += 1
            if self.reads == 2:
                self.both.set()
            await self.both.wait()
        return found


async def test_racing_early_resumes_of_one_token_keep_one(
        db_url: str, workspace_id: str, clock: FakeClock, config: StarflowConfig) -> None:
    """Two early resumes of one token at once: one is kept, the other is already_used,
    and the later wait on the same event is not woken by the loser's payload."""
    outbox.clear()

    @workflow(name=unique("early-race"))
    async def wf() -> list[Any]:
        await request_approval("o")
        first = await wait_for("first")
        return [first, await wait_for("approval"), await wait_for("approval")]

    adapter = _BothPastTheCheck(adapter_from_url(db_url, workspace_id=workspace_id))
    async with Starflow(adapter, clock=clock, config=config, maintenance=False) as sf:
        h = await sf.run(wf)
        token = outbox[-1]
        adapter.reads = 0
        answers: dict[str, str] = {}

        async def resume(payload: str) -> None:
            try:
                answers[payload] = (await sf.resume(token, payload)).status
            except InvalidWakeToken as exc:
                answers[payload] = exc.reason

        async with anyio.create_task_group() as tg:
            tg.start_soon(resume, "P1")
            tg.start_soon(resume, "P2")
        assert sorted(answers.values()) == ["already_used", "paused"], answers
        kept = next(p for p, answer in answers.items() if answer == "paused")
        after = await sf.signal(h.run_id, "first", "F")
        assert (after.status, after.waiting_for) == ("paused", "approval")
        done = await sf.signal(h.run_id, "approval", "A2")
        assert (done.status, done.result) == ("success", ["F", kept, "A2"])


class TestRejections:
    """sf.resume rejects bad tokens with a reason and writes nothing."""

    async def _paused(self, sf: Starflow) -> tuple[str, str]:
        h = await sf.run(approval_workflow(), "o")
        assert h.wake_token is not None
        return h.run_id, h.wake_token

    async def _rejects(self, sf: Starflow, run_id: str, token: Any, reasons: set[str]) -> None:
        before = await snapshot(sf, run_id)
        with pytest.raises(InvalidWakeToken) as err:
            await sf.resume(token, {"ok": True})
        assert err.value.reason in reasons, err.value
        assert await snapshot(sf, run_id) == before

    async def test_forged(self, sf: Starflow) -> None:
        run_id, token = await self._paused(sf)
        claims = Keyring(KEYS).verify(token, workspace_id=sf.adapter.workspace_id, env="prod",
                                      now=sf.clock.now())
        forged = Keyring({"k1": "an-attacker-guessed-secret"}).sign(claims)
        await self._rejects(sf, run_id, forged, {"bad_signature"})
        await self._rejects(sf, run_id, token[:-2] + ("AA" if token[-2:] != "AA" else "BB"),
                            {"bad_signature"})

    async def test_truncated(self, sf: Starflow) -> None:
        run_id, token = await self._paused(sf)
        for cut in (1, 10, len(token) // 2, len(token) - 5):
            await self._rejects(sf, run_id, token[:cut], {"malformed", "bad_signature",
                                                          "unknown_key"})
        await self._rejects(sf, run_id, 12345, {"malformed"})

    async def test_expired(self, sf: Starflow, clock: FakeClock) -> None:
        run_id, token = await self._paused(sf)
        await clock.advance(timedelta(hours=2))  # wake_token_ttl is 1 h in these tests
        await self._rejects(sf, run_id, token, {"expired"})

    async def test_already_used(self, sf: Starflow) -> None:
        run_id, token = await self._paused(sf)
        assert (await sf.resume(token, {"ok": True})).status == "success"
        await self._rejects(sf, run_id, token, {"already_used"})

    async def test_token_of_a_run_cancelled_at_its_wait(self, sf: Starflow) -> None:
        """The run ended without its wait being woken: RunFinished (nothing to resume), not
        already_used, and nothing written."""
        run_id, token = await self._paused(sf)
        await sf.cancel(run_id, force=True)
        before = await snapshot(sf, run_id)
        with pytest.raises(starflow.RunFinished) as err:
            await sf.resume(token, {"ok": True})
        assert err.value.status == "cancelled" and err.value.run_id == run_id
        assert "cannot resume run" in str(err.value)
        assert await snapshot(sf, run_id) == before

    async def test_token_of_a_wait_a_signal_woke(self, sf: Starflow) -> None:
        """The wait was woken by a signal and the run ended: the token is already_used."""
        run_id, token = await self._paused(sf)
        assert (await sf.signal(run_id, "approval", {"ok": True})).status == "success"
        await self._rejects(sf, run_id, token, {"already_used"})

    async def test_wrong_wait(self, sf: Starflow) -> None:
        """A genuine token for a wait the run is not at (a later occurrence)."""
        run_id, token = await self._paused(sf)
        claims = Keyring(KEYS).verify(token, workspace_id=sf.adapter.workspace_id, env="prod",
                                      now=sf.clock.now())
        later = Keyring(KEYS).sign(WakeClaims(r=claims.r, n="wait:approval#2", w=claims.w,
                                              e=claims.e, x=claims.x))
        await self._rejects(sf, run_id, later, {"wrong_wait"})
        step_node = Keyring(KEYS).sign(WakeClaims(r=claims.r, n="step:tok_request_approval#1",
                                                  w=claims.w, e=claims.e, x=claims.x))
        await self._rejects(sf, run_id, step_node, {"wrong_wait", "already_used"})

    async def test_wrong_workspace(self, tmp_path: Path, clock: FakeClock) -> None:
        """Same database, same keys, another workspace: rejected, nothing written."""
        url = f"sqlite:///{tmp_path / 'shared.db'}"
        config = StarflowConfig(wake_keys=KEYS)
        a = Starflow(adapter_from_url(url, workspace_id="ws-a"), clock=clock, config=config,
                     maintenance=False)
        b = Starflow(adapter_from_url(url, workspace_id="ws-b"), clock=clock, config=config,
                     maintenance=False)
        async with a, b:
            run_id, token = await self._paused(a)
            before = await snapshot(a, run_id)
            with pytest.raises(InvalidWakeToken) as err:
                await b.resume(token, {"ok": True})
            assert err.value.reason == "wrong_workspace"
            assert await snapshot(a, run_id) == before


VALID = Keyring(KEYS).sign(WakeClaims(r="00000000-0000-4000-8000-000000000001",
                                      n="wait:approval#1", w="celestial", e="prod",
                                      x=4102444800))


def _flip(token: str, index: int, bit: int) -> str:
    raw = bytearray(token.encode())
    raw[index % len(raw)] ^= 1 << bit
    return raw.decode("latin-1")


mutations = st.one_of(
    st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 7)).map(lambda t: _flip(VALID, *t)),
    st.integers(0, len(VALID) - 1).map(lambda n: VALID[:n]),
    st.text(min_size=1).map(lambda extra: VALID + extra),
    st.tuples(st.integers(0, len(VALID) - 1), st.characters()).map(
        lambda t: VALID[:t[0]] + t[1] + VALID[t[0] + 1:]),
)


@settings(max_examples=1500, deadline=None)
@given(mutations)
def test_no_mutation_of_a_valid_token_verifies(mutated: str) -> None:
    """Bit flips, truncations, extensions and substitutions anywhere never verify."""
    from datetime import UTC, datetime

    if mutated == VALID:
        return
    with pytest.raises(InvalidWakeToken):
        Keyring(KEYS).verify(mutated, workspace_id="celestial", env="prod",
                             now=datetime(2030, 1, 1, tzinfo=UTC))


def test_non_ascii_token_is_malformed_not_a_crash() -> None:
    """A lone surrogate (found by hypothesis) or any non-ASCII text is 'malformed'."""
    from datetime import UTC, datetime

    keyring = Keyring(KEYS)
    for bad in (VALID[:8] + "\ud800" + VALID[9:], VALID + "é"):
        with pytest.raises(InvalidWakeToken) as info:
            keyring.verify(bad, workspace_id="celestial", env="prod",
                           now=datetime(2030, 1, 1, tzinfo=UTC))
        assert info.value.reason == "malformed"
