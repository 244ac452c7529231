"""The runner's in-memory view of the runs and the deltas it sends (runner.daemon.runview): a
subscriber that applies the deltas holds what a fresh full snapshot holds, after any sequence of
ledger writes, clock ticks and reconnects; and a second with nothing new costs no per-run work."""

from __future__ import annotations

import tempfile
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.campaign.model import load_campaign
from runner.daemon import protocol
from runner.daemon.runview import RunView
from runner.daemon.status import build_snapshot
from runner.daemon.status_types import apply_delta, index_runs
from runner.ledger import store as L
from tests.helpers_runner import write_campaign

VARIANTS = ["a", "b", "c"]
STATES = ["queued", "running", "finished", "failed", "stopped", "aborted"]


def _setup(root: Path, clock: dict):
    write_campaign(root, [{"name": v, "extra": 'checkpoint_every = "10m"\n'} for v in VARIANTS], phase=[])
    campaign = load_campaign(root)
    led = L.Ledger(root / ".campaign" / "ledger.sqlite")
    view = RunView(campaign, led.conn, clock=lambda: clock["now"])
    led.run_listeners.append(view.touch)
    led.listeners.append(view.on_event)
    return campaign, led, view


def _insert(led: L.Ledger, root: Path, rid: str, variant: str, state: str, now: float) -> None:
    led.insert_run(
        {
            "id": rid,
            "variant": variant,
            "category": "essential",
            "config_hash": rid[-8:],
            "state": state,
            "run_dir": str(root / "runs" / rid),
            "planned_hours": 1,
            "queued_at": now,
            "launched_at": now if state != "queued" else None,
            "attempt_started_at": now if state != "queued" else None,
            "ended_at": now if state not in ("queued", "running") else None,
            "attempts": 0 if state == "queued" else 1,
        }
    )


class Subscriber:
    """What the console does: one full state, then deltas, each through the wire format."""

    def __init__(self, view: RunView) -> None:
        self.connect(view)

    def connect(self, view: RunView) -> None:
        self.state = protocol.decode(protocol.encode(protocol.event("status", view.snapshot())))["data"]
        self.index = index_runs(self.state)

    def follow(self, view: RunView) -> None:
        delta = view.delta(self.state.get("seq", 0))
        if delta is not None:
            data = protocol.decode(protocol.encode(protocol.event("delta", delta)))["data"]
            assert data["since"] == self.state.get("seq", 0)
            apply_delta(self.state, self.index, data)


op = st.one_of(
    st.tuples(st.just("new"), st.sampled_from(VARIANTS), st.sampled_from(STATES)),
    st.tuples(st.just("state"), st.integers(0, 50), st.sampled_from(STATES)),
    st.tuples(st.just("metrics"), st.integers(0, 50), st.floats(allow_nan=True, allow_infinity=True, width=32)),
    st.tuples(st.just("ckpt"), st.integers(0, 50), st.integers(0, 10_000)),
    st.tuples(st.just("event"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("tick"), st.just(0), st.just(0)),
    st.tuples(st.just("reconnect"), st.just(0), st.just(0)),
    st.tuples(st.just("push"), st.just(0), st.just(0)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=40))
def test_deltas_applied_equal_a_fresh_full_snapshot(ops) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "camp"
        clock = {"now": 1_800_000_000.0}
        campaign, led, view = _setup(root, clock)
        a = Subscriber(view)  # stays connected throughout
        b = Subscriber(view)  # reconnects now and then (a fresh full state, then deltas again)
        ids: list[str] = []
        for kind, x, y in ops:
            if kind == "new":
                rid = f"{x}-{len(ids):08x}"
                _insert(led, root, rid, x, y, clock["now"])
                ids.append(rid)
            elif kind == "state" and ids:
                rid = ids[x % len(ids)]
                ended = y not in ("queued", "running")
                led.update_run(rid, state=y, ended_at=clock["now"] if ended else None, stop_reason=f"r{x}")
            elif kind == "metrics" and ids:
                rec = [{"t": clock["now"], "step": x, "loss": y, "samples": 10}]
                led.record_metrics(ids[x % len(ids)], rec, offset=x, bad_lines=0, restarts=0)
            elif kind == "ckpt" and ids:
                verified = 1 if y % 3 else None  # some wait for their verdict: their rows move with the clock
                led.upsert_checkpoint(ids[x % len(ids)], f"/c/{y}.pt", step=y, t=clock["now"], verified=verified)
            elif kind == "event" and ids:
                led.event("note", ids[x % len(ids)], t=clock["now"])
            elif kind == "tick":
                clock["now"] += 1.0
            elif kind == "reconnect":
                view.refresh()
                b.connect(view)
                continue
            if kind == "push" or kind == "tick":
                view.refresh()
                a.follow(view)
                b.follow(view)
        view.refresh()
        a.follow(view)
        b.follow(view)
        full = msgspec.to_builtins(view.snapshot())
        fresh = msgspec.to_builtins(build_snapshot(campaign, led.conn, now=clock["now"]))
        for sub in (a, b):
            assert sub.state["runs"] == full["runs"] == fresh["runs"]
            assert sub.state["queue"] == full["queue"] == fresh["queue"]
            assert sub.state["variants"] == full["variants"] == fresh["variants"]
            assert sub.state["seq"] == view.seq
        led.close()


def test_a_second_with_nothing_new_sends_nothing_and_reads_nothing(tmp_path) -> None:
    clock = {"now": 1_800_000_000.0}
    campaign, led, view = _setup(tmp_path / "camp", clock)
    for i in range(300):
        _insert(led, tmp_path, f"a-{i:08x}", "a", "finished", clock["now"] - 1000 + i)
    view.refresh()
    sub = Subscriber(view)
    statements: list[str] = []
    led.conn.set_trace_callback(statements.append)
    builds = view.row_builds
    for _ in range(5):
        clock["now"] += 1.0
        view.refresh()
        assert view.delta(sub.state["seq"]) is None  # nothing to send
    assert view.row_builds == builds  # no row recomputed
    assert statements == []  # not one query: the ended runs are not read again

    # two running runs: each second costs those two rows, however many runs have ended
    _insert(led, tmp_path, "b-00000001", "b", "running", clock["now"])
    _insert(led, tmp_path, "c-00000002", "c", "running", clock["now"])
    view.refresh()
    sub.follow(view)
    statements.clear()
    builds = view.row_builds
    clock["now"] += 1.0
    view.refresh()
    assert view.row_builds - builds == 2
    assert statements == []  # their inputs are cached until the ledger writes them
    delta = view.delta(sub.state["seq"])
    assert delta is not None and sorted(r.id for r in delta.runs) == ["b-00000001", "c-00000002"]
    assert delta.variants is None  # unchanged: not sent again

    # a metric line for one of them: that run alone is read back, and only its metric summary
    led.record_metrics("b-00000001", [{"t": clock["now"], "step": 5, "loss": 1.0}], offset=1, bad_lines=0, restarts=0)
    statements.clear()
    view.refresh()
    assert len(statements) == 2, statements  # its metric_last and run_progress rows
    assert not any("FROM runs" in q or "checkpoints" in q for q in statements)
    row = view.row("b-00000001")
    assert row is not None and row.step == 5

    # a change of its run row (a state, a checkpoint) reads the rest again
    led.update_run("b-00000001", stop_reason="r")
    led.record_metrics("b-00000001", [{"t": clock["now"], "step": 6, "loss": 0.9}], offset=2, bad_lines=0, restarts=0)
    statements.clear()
    view.refresh()
    assert any("FROM runs" in q for q in statements) and any("checkpoints" in q for q in statements)
    row = view.row("b-00000001")
    assert row is not None and (row.stop_reason, row.step) == ("r", 6)
    led.close()


def test_an_idle_runner_tick_does_not_look_for_queued_runs_again(tmp_path) -> None:
    """The runner's tick (4 a second) read the queued runs each time; with none queued it now
    looks again only after the ledger wrote a run row (the only way a run gets queued)."""
    from runner.daemon.launcher import RunManager
    from runner.daemon.slots import plan_slots

    clock = {"now": 1_800_000_000.0}
    campaign, led, _ = _setup(tmp_path / "camp", clock)
    _insert(led, tmp_path, "a-00000001", "a", "finished", clock["now"])
    manager = RunManager(campaign, led, plan_slots(campaign, gpu_count=0, nvml_error=None), grace_seconds=1)
    statements: list[str] = []
    led.conn.set_trace_callback(statements.append)
    manager.schedule()
    assert any("FROM runs" in q for q in statements)  # the first look
    statements.clear()
    for _ in range(4):
        manager.schedule()
    led.record_metrics("a-00000001", [{"t": clock["now"], "step": 1, "loss": 1.0}], offset=1, bad_lines=0, restarts=0)
    statements.clear()
    manager.schedule()
    assert statements == []  # nothing queued, and a metric batch queues nothing
    led.update_run("a-00000001", stop_reason="note")
    statements.clear()
    manager.schedule()
    assert any("FROM runs" in q for q in statements)  # a run row was written: look again
    led.close()
