"""The simulated sync-group link (`comm.LinkModel`): latency + bytes / bandwidth, one transfer at a time.

tests/distributed/test_link.py measures it through real collectives; here the arithmetic of a
transfer's deadline, and the queue of transfers one behind the other, are checked on given times.
"""

from __future__ import annotations

import pytest

from edit_lab.core.comm import LinkModel


def test_no_latency_and_no_bandwidth_limit_is_an_inactive_link():
    link = LinkModel()
    assert not link.active
    assert link.transfer_time(10**9) == 0.0
    assert link.deadline(2.5, 10**9) == 2.5  # completes when the real collective did


def test_a_transfer_takes_latency_plus_bytes_over_bandwidth():
    link = LinkModel(latency_s=5e-3, bandwidth_Bps=20e6)
    assert link.active
    assert link.transfer_time(1_000_000) == pytest.approx(0.005 + 0.05)
    assert LinkModel(latency_s=5e-3).transfer_time(10**9) == pytest.approx(0.005)  # unlimited bandwidth
    assert LinkModel(bandwidth_Bps=1e6).active


def test_transfers_queue_behind_each_other_and_an_idle_link_starts_at_the_real_completion():
    link = LinkModel(latency_s=0.01, bandwidth_Bps=1e6)  # 1000 bytes: 0.011 s
    assert link.deadline(1.000, 1000) == pytest.approx(1.011)
    # done for real at 1.005, while the link still carries the first transfer: it starts at 1.011
    assert link.deadline(1.005, 1000) == pytest.approx(1.022)
    assert link.free_at == pytest.approx(1.022)
    # the link has been idle since 1.022: the next one starts when it completes for real
    assert link.deadline(2.000, 4000) == pytest.approx(2.014)


def test_every_participant_computes_the_same_deadlines_from_the_same_sequence():
    """No message is exchanged: two ranks seeing the same completions and sizes agree on every deadline."""
    seq = [(0.10, 500_000), (0.12, 100), (0.90, 2_000_000), (0.91, 0)]
    a, b = LinkModel(2e-3, 41.5e6), LinkModel(2e-3, 41.5e6)
    assert [a.deadline(t, n) for t, n in seq] == [b.deadline(t, n) for t, n in seq]
