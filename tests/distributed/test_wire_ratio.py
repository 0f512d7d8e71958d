"""Issue 48 item 2: compression keeps its ratio at every width, by the runs' own events.

DiLoCo, nano, 24 steps, H = 4, virtual clock: rank 0's pseudo-gradient bytes (the sync group's
`PSEUDO_GRADIENT_KINDS`; warm-up gradient all-reduces left out) against float32's. R = 2, 4, 8 run the real
model on the virtual clock; R = 64 runs its time-only mode (`virtual_compute="charged"`), which records the
same bytes as the real model (checked at R = 8). The R = 64 margin is the padding to 64 whole-block chunks of
nano's 41,632 values (163 blocks -> 192): 0.2998 of float32 in int8."""

from __future__ import annotations

import pytest

from edit_lab import launch
from edit_lab.config import RunConfig
from edit_lab.core.wire import PSEUDO_GRADIENT_KINDS


def sync_bytes(tmp_path, R: int, fmt: str, compute: str) -> int:
    run = launch(RunConfig(model="nano", method="diloco", shards=1, replicas=R, steps=24, warmup_steps=2,
                           sync_interval=4, seq_len=32, batch_size=4, eval_every=0, progress=False, clock="virtual",
                           virtual_compute=compute, wire_format=fmt, timeout_s=600,
                           out=str(tmp_path / f"R{R}-{fmt}-{compute}")))
    events = [e for e in run.events
              if e["rank"] == 0 and e.get("group") == "sync" and e["kind"] in PSEUDO_GRADIENT_KINDS]
    assert len(events) == 6  # syncs after steps 6, 10, 14, 18, 22 and the closing one
    return sum(int(e["bytes"]) for e in events)


@pytest.mark.parametrize("R", [2, 4, 8, 64])
def test_int_formats_keep_their_ratio_at_every_width(tmp_path, R):
    compute = "charged" if R > 8 else "real"
    got = {fmt: sync_bytes(tmp_path, R, fmt, compute) for fmt in ("none", "bf16", "int8", "int4")}
    # the ring rule: an all-reduce of T bytes sends 2(R - 1)/R·T; nano's packed pseudo-gradient is 166,528 bytes
    assert got["none"] == 6 * (2 * (R - 1) * 166528 // R)
    assert got["bf16"] / got["none"] == pytest.approx(0.5, abs=1e-5)
    assert got["int8"] / got["none"] <= 0.30
    assert got["int4"] / got["none"] <= 0.17


def test_time_only_records_the_real_bytes(tmp_path):
    for fmt in ("int8", "int4"):
        assert sync_bytes(tmp_path, 8, fmt, "charged") == sync_bytes(tmp_path, 8, fmt, "real")
