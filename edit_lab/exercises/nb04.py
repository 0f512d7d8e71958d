"""Checks for notebook 04 (layer-wise sync and prefetch): what prefetch can hide, and what the link costs.

The answers follow from two rules the notebook shows on real runs: on the simulated sync link a
transfer of n bytes takes `latency + n / bandwidth`, one transfer at a time (edit_lab.comm.LinkModel);
and with prefetch, unit l+1's transfer is issued when unit l's sync starts, so it overlaps unit l's
compute, while unit 0 has nothing before it to overlap with.
"""

from __future__ import annotations

from typing import Any

from . import as_number, correct, unanswered


def transfer_ms(nbytes: int, latency_ms: float, bandwidth_mbps: float) -> float:
    """One transfer on the simulated link, in ms: latency + bytes / bandwidth (MB/s = 10⁶ bytes per second)."""
    return latency_ms + nbytes / (bandwidth_mbps * 1e6) * 1e3


def exposed_ms(n_units: int, transfer: float, compute: float, prefetch: bool) -> float:
    """Milliseconds a rank stands blocked on one sync's `sync_reduce`s, every unit alike (an idealised model).

    Without prefetch every transfer is waited for in full: n·x. With prefetch unit 0 is waited for in full
    (x); each later unit's transfer starts when the link frees (one transfer at a time) and overlaps the
    previous unit's compute c, so it adds max(0, x − c): x + (n − 1)·max(0, x − c).
    """
    if n_units <= 0:
        return 0.0
    if not prefetch:
        return n_units * transfer
    return transfer + (n_units - 1) * max(0.0, transfer - compute)


def check_unhidden_unit(answer: Any) -> bool:
    """Which unit's sync can prefetch never hide? (unit 0: the first one the forward meets)."""
    if unanswered(answer, "prefetch issues unit l+1's transfer while unit l computes. Which unit has no unit "
                          "before it? Look at the 'exposed (ms)' column of the prefetch-on table."):
        return False
    assert as_number(answer, "a unit number") == 0, (
        f"unit {answer} is not it: its transfer was issued one unit early and overlapped the previous unit's "
        f"compute. The forward starts with unit 0 (the root unit: embeddings, final norm, head), and nothing "
        f"runs before it in the step, so its whole transfer is exposed.")
    return correct("Correct: unit 0. It is the first unit of the forward pass, so there is no compute to hide "
                   "its transfer behind. (Unit 1 fares little better on a real model: its transfer queues "
                   "behind unit 0's on the link, and only the embedding lookup, a table read, runs before it. "
                   "From unit 2 on, each transfer travels under the previous block's forward.)")


def check_transfer_ms(answer: Any, nbytes: int = 99_072, latency_ms: float = 2.0,
                      bandwidth_mbps: float = 20.0) -> bool:
    """Milliseconds of one transfer of `nbytes` on a link of `latency_ms` and `bandwidth_mbps`."""
    if unanswered(answer, "a transfer takes latency + bytes / bandwidth; 20 MB/s is 20·10⁶ bytes per second, "
                          "and the answer is in milliseconds."):
        return False
    want = transfer_ms(nbytes, latency_ms, bandwidth_mbps)
    assert abs(as_number(answer) - want) <= 0.01, (
        f"{answer} ms is not it. The bandwidth part is {nbytes} B / {bandwidth_mbps:g}·10⁶ B/s = "
        f"{nbytes / (bandwidth_mbps * 1e6) * 1e3:.4f} ms; do not forget the latency of {latency_ms:g} ms "
        f"(and keep MB = 10⁶ bytes).")
    return correct(f"Correct: {latency_ms:g} + {nbytes / (bandwidth_mbps * 1e6) * 1e3:.4f} = {want:.4f} ms per "
                   f"transfer. A sync sends one such transfer per unit, one after the other.")


def check_exposed_with_prefetch(answer: Any, n_units: int = 5, transfer: float = 7.0, compute: float = 3.0) -> bool:
    """Blocked ms per sync with prefetch, for `n_units` alike units (transfer x, compute c)."""
    if unanswered(answer, "unit 0's transfer is waited for in full; each later unit's transfer runs on the link "
                          "right after the previous one and overlaps the previous unit's compute."):
        return False
    want = exposed_ms(n_units, transfer, compute, prefetch=True)
    without = exposed_ms(n_units, transfer, compute, prefetch=False)
    assert abs(as_number(answer) - want) <= 0.01, (
        f"{answer} ms is not it. Unit 0: {transfer:g} ms in full. Each of the other {n_units - 1} units: its "
        f"transfer starts when the link frees and overlaps {compute:g} ms of the previous unit's compute, so "
        f"only max(0, {transfer:g} − {compute:g}) ms of it is exposed. (Without prefetch: {without:g} ms.)")
    return correct(f"Correct: {transfer:g} + {n_units - 1}·({transfer:g} − {compute:g}) = {want:g} ms instead of "
                   f"{without:g} ms. Prefetch saves at most one unit's compute per unit: on a very slow link the "
                   f"transfers dominate either way.")
