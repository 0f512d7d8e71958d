"""A-EDiT's trigger, without processes: the timer, the meeting, the decision, the weights — on a fake clock.

The last tests replay the protocol of `edit_lab.core.methods.aedit` (step starts, timer checks, blocking
meetings, restarts from the common value, the done-loop of `finalize`) as a discrete-event simulation
built from the module's own pieces, so speeds, periods and N_min can be varied freely and exactly.
"""

from __future__ import annotations

import math

import pytest

from edit_lab.core.methods.aedit import Meeting, SyncTimer, active_weights, decide_sync, mix_step_weights


def test_timer_expires_after_the_period_in_float64():
    timer = SyncTimer(0.5)
    assert not timer.running
    timer.start(1000.0)
    assert not timer.expired(1000.4999)
    assert timer.expired(1000.5)
    # D3: float64 clocks keep millisecond periods ten hours into a run (float32 spaces its values 4 ms apart
    # at 36 000 s, and 128 s apart at a time.time() of 1.7e9 s)
    timer = SyncTimer(0.001)
    timer.start(36_000.0)
    assert not timer.expired(36_000.0009)
    assert timer.expired(36_000.0011)
    timer.stop()
    assert not timer.running and timer.elapsed(5.0) == 0.0


def test_meeting_decodes_the_gathered_rows():
    m = Meeting.from_rows([[7, 3, 1.25, 0, 40], [4, 2, 1.5, 1, 31]])
    assert m.since_sync == [7, 4] and m.since_meeting == [3, 2] and m.steps == [40, 31]
    assert m.total == 11 and m.restart_time == 1.5 and m.done == [False, True] and not m.all_done


def test_decide_sync_applies_n_min_until_everyone_is_done():
    assert not decide_sync(5, 6, all_done=False)
    assert decide_sync(6, 6, all_done=False)
    assert decide_sync(1, 100, all_done=True)  # the last meeting syncs whatever was trained
    assert not decide_sync(0, 1, all_done=True)  # …and nothing when nothing was


def test_replicas_without_steps_get_no_weight():
    assert active_weights([0.7, 0.3], [5, 0]) == [1.0, 0.0]
    assert active_weights([0.5, 0.25, 0.25], [1, 2, 3]) == [0.5, 0.25, 0.25]
    assert active_weights([0.0, 0.0], [0, 0]) == [0.0, 0.0]


def test_step_weights_mix_with_the_round_shares():
    # softmax weights of §8 (G = [1, 2], T = 1) mixed with shares 3:1 at rho = 0.5
    w = mix_step_weights([0.7310586, 0.2689414], [30, 10], 0.5)
    assert w == pytest.approx([0.5 * 0.7310586 + 0.5 * 0.75, 0.5 * 0.2689414 + 0.5 * 0.25])
    assert sum(w) == pytest.approx(1.0)
    assert mix_step_weights([0.5, 0.5], [8, 2], 1.0) == pytest.approx([0.8, 0.2])  # rho = 1: shares only
    assert mix_step_weights([0.5, 0.5], [8, 2], 0.0) == pytest.approx([0.5, 0.5])  # rho = 0: penalty only
    # an anomalous replica (weight 0) stays at 0 and the shares are taken over the others
    assert mix_step_weights([1.0, 0.0, 0.0], [2, 50, 3], 0.5) == pytest.approx([1.0, 0.0, 0.0])
    w = mix_step_weights([0.6, 0.0, 0.4], [2, 50, 6], 0.5)
    assert w == pytest.approx([0.3 + 0.5 * 0.25, 0.0, 0.2 + 0.5 * 0.75]) and sum(w) == pytest.approx(1.0)


# ---------------------------------------------------------------- the protocol on a fake clock
def simulate(step_times: list[float], period: float, n_min: int, steps: int, warmup: int = 0,
             jitter: float = 0.0) -> dict:
    """Replay A-EDiT's per-step protocol for replicas with the given step durations (fake seconds).

    A replica at a step start either trains (clock += its step time), or enters a meeting, which completes
    when every replica has entered; everyone leaves at the latest entry time. Returns every replica's
    sequence of meetings, their waits and the rounds. Raises if a meeting could never complete (deadlock).
    """
    R = len(step_times)
    clock = [float(warmup)] * R  # warm-up: lockstep, one unit of time per step
    step = [warmup] * R
    last_sync = [warmup] * R
    last_meeting = [warmup] * R
    timers = [SyncTimer(period) for _ in range(R)]
    for r in range(R):
        timers[r].start(clock[r])
    seen: list[list[Meeting]] = [[] for _ in range(R)]
    waits: list[list[float]] = [[] for _ in range(R)]
    decisions: list[list[bool]] = [[] for _ in range(R)]
    entered: dict[int, list[float]] = {}
    for _ in range(100_000):
        # the replica that is earliest in time acts next (a blocked replica waits for the meeting)
        free = [r for r in range(R) if r not in entered]
        if not free:  # everyone is in the meeting: it completes
            rows = [entered[r] for r in range(R)]
            m = Meeting.from_rows(rows)
            sync = decide_sync(m.total, n_min, m.all_done)
            for r in range(R):
                waits[r].append(m.restart_time - entered[r][2])
                clock[r] = m.restart_time
                timers[r].restart(m.restart_time)
                seen[r].append(m)
                decisions[r].append(sync)
                last_meeting[r] = step[r]
                if sync:
                    last_sync[r] = step[r]
            entered = {}
            if m.all_done:
                return {"meetings": seen, "waits": waits, "decisions": decisions, "clock": clock}
            for r in range(R):  # a replica that met at a step start now trains that step
                if step[r] < steps:
                    clock[r] += step_times[r] * (1.0 + jitter * math.sin(7.0 * step[r] + r))
                    step[r] += 1
            continue
        r = min(free, key=lambda i: clock[i])
        done = step[r] >= steps
        if done or timers[r].expired(clock[r]):
            entered[r] = [step[r] - last_sync[r], step[r] - last_meeting[r], clock[r], float(done), step[r]]
        else:
            clock[r] += step_times[r] * (1.0 + jitter * math.sin(7.0 * step[r] + r))
            step[r] += 1
    raise AssertionError("the protocol did not terminate")


def test_every_replica_sees_the_same_meetings_and_decisions():
    out = simulate([1.0, 2.0, 3.3], period=10.0, n_min=1, steps=120, jitter=0.2)
    assert out["meetings"][0] == out["meetings"][1] == out["meetings"][2]
    assert out["decisions"][0] == out["decisions"][1] == out["decisions"][2]
    last = out["meetings"][0][-1]
    assert last.all_done and (out["decisions"][0][-1] or last.total == 0)  # ended in agreement


def test_a_twice_as_fast_replica_trains_twice_the_steps_and_waits_at_most_one_slow_step():
    out = simulate([1.0, 2.0], period=20.0, n_min=1, steps=400)
    running = [m for m in out["meetings"][0] if not any(m.done)]
    assert len(running) >= 5
    for m in running[1:]:
        fast, slow = m.since_meeting
        assert fast / slow == pytest.approx(2.0, abs=0.25)
    waits_while_running = [w for w, m in zip(out["waits"][0], out["meetings"][0]) if not any(m.done)]
    assert max(waits_while_running) <= 2.0  # never more than one step of the slow replica
    assert max(w for w, m in zip(out["waits"][1], out["meetings"][1]) if not any(m.done)) <= 1.0


def test_n_min_above_a_round_skips_it_everywhere_and_steps_accumulate():
    # rounds of ~5 + ~2 steps; N_min = 15 needs about two rounds
    out = simulate([1.0, 2.5], period=5.0, n_min=15, steps=100)
    decisions, meetings = out["decisions"][0], out["meetings"][0]
    running = [(d, m) for d, m in zip(decisions, meetings) if not any(m.done)]
    assert any(not d for d, _ in running) and any(d for d, _ in running)  # some rounds skipped, some synced
    for d, m in running:
        assert d == (m.total >= 15)
    # after a skip the steps since the last sync keep growing; after a sync they restart
    for (d0, m0), (_, m1) in zip(running, running[1:]):
        expect = m1.since_meeting if d0 else [a + b for a, b in zip(m0.since_sync, m1.since_meeting)]
        assert m1.since_sync == expect


def test_an_n_min_never_reached_still_ends_in_one_final_sync():
    out = simulate([1.0, 1.7], period=3.0, n_min=10**9, steps=60)
    assert sum(out["decisions"][0]) == 1 and out["decisions"][0][-1]  # only the all-done meeting syncs


def test_one_step_periods_meet_at_every_step_and_n_min_gives_edits_schedule():
    # a period shorter than a step: every step start is a meeting; N_min = R·τ then syncs every τ steps
    tau, R = 3, 2
    out = simulate([1.0, 1.0], period=1e-9, n_min=R * tau, steps=20, warmup=2)
    synced_at = [m.steps[0] for d, m in zip(out["decisions"][0], out["meetings"][0]) if d]
    assert synced_at == [5, 8, 11, 14, 17, 20]  # W + kτ, and the end (as edit's finalize)


def test_active_weights_leave_a_lockstep_round_bit_for_bit_alone():
    from edit_lab.core.methods.aedit import active_weights

    w = [0.49754702951169577, 0.5024529704883042]  # EDiT's softmax weights of a real sync (sum 1 ± 1 ulp)
    assert active_weights(w, [3, 3]) == w  # renormalising changed the first one's last bit
    assert active_weights(w, [3, 0]) == [1.0, 0.0]
