"""Bytes of the sync group's pseudo-gradients against float32's, by the runs' own events (issue 48 item 2).

DiLoCo, nano, 24 steps, H = 4, on the virtual clock; R = 64 in its time-only mode (`virtual_compute="charged"`:
the collectives and charges of the real schedule on tiny stand-in tensors, declared at the real model's bytes).
Usage: python -m benchmarks.wire_ratio [R ...]"""

from __future__ import annotations

import sys
import tempfile

from edit_lab import launch
from edit_lab.config import RunConfig
from edit_lab.core.wire import PSEUDO_GRADIENT_KINDS, WIRE_FORMATS


def sync_bytes(run) -> int:
    """Bytes rank 0 sent for pseudo-gradients (warm-up gradient all-reduces left out)."""
    return sum(int(e["bytes"]) for e in run.events
               if e["rank"] == 0 and e.get("group") == "sync" and e["kind"] in PSEUDO_GRADIENT_KINDS)


def table(replicas: list[int], out: str) -> dict[int, dict[str, float]]:
    rows = {}
    for R in replicas:
        got = {}
        for fmt in WIRE_FORMATS:
            cfg = RunConfig(model="nano", method="diloco", shards=1, replicas=R, steps=24, warmup_steps=2,
                            sync_interval=4, seq_len=32, batch_size=4, eval_every=0, progress=False, clock="virtual",
                            virtual_compute="charged" if R > 8 else "real", wire_format=fmt, timeout_s=600,
                            out=f"{out}/R{R}-{fmt}",
                            # SparseLoCo's own outer step (its error feedback in place of momentum)
                            **(dict(error_feedback=True, outer_momentum=0.0) if fmt == "sparseloco" else {}))
            got[fmt] = sync_bytes(launch(cfg))
        rows[R] = {fmt: got[fmt] / got["none"] for fmt in WIRE_FORMATS}
        print(R, " ".join(f"{fmt} {rows[R][fmt]:.3f}" for fmt in WIRE_FORMATS), f"(none: {got['none']} bytes)",
              flush=True)
    return rows


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        table([int(x) for x in sys.argv[1:]] or [2, 4, 8, 64], d)
