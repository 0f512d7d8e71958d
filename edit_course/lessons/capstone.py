"""The capstone's mysteries: three real runs, each with one hidden trouble, to diagnose with the lab's tools.

Every mystery is a 1-shard × 4-replica EDiT run of the nano model with occasional random pauses on
every replica (as on a real cluster). On top of that, each run has exactly one of three troubles,
each kind once, in an order the student does not know:

- ``straggler``: one replica's steps take `factor`× as long (factor one of FACTORS);
- ``bad_data``: one replica is fed random bytes from the middle of the run on;
- ``slow_link``: the sync group's link carries `bandwidth_mb_s` megabytes per second (one of
  BANDWIDTHS_MB_S) after a latency of LINK_LATENCY_MS.

The seed that picks the troubles is hidden: `make_mysteries` draws it from the operating system
when none is given and does not print it. The run directories keep the lab's files, but their
config.json has the trouble fields reset to the defaults, and the right answer is kept only as a
salted SHA-256 in `mystery.json`, so reading the config gives nothing away. `check` hashes a
diagnosis the same way and compares.

    python -m edit_course.tools.make_mysteries          # re-record the shipped mysteries (new hidden seed)
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edit_course import MYSTERIES
from edit_lab.config import RunConfig
from edit_lab.records import rundir
from edit_lab.records.run import Run

HERE = MYSTERIES
LETTERS = ("A", "B", "C")
KINDS = ("straggler", "bad_data", "slow_link")
REPLICAS = 4
FACTORS = (1.5, 2.0, 3.0)
BANDWIDTHS_MB_S = (0.5, 1.5, 5.0)
LINK_LATENCY_MS = 2.0
# the fields a trouble sets; config.json shows their defaults instead
HIDDEN_FIELDS = ("straggler_replicas", "straggler_factor", "corrupt_replica", "corrupt_from_step",
                 "corrupt_mode", "link_latency_ms", "link_bandwidth_mb_s")


@dataclass(frozen=True)
class Mystery:
    """One hidden trouble: its kind and the detail a diagnosis must name (replica, factor or bandwidth)."""

    letter: str
    kind: str
    detail: dict[str, Any] = field(default_factory=dict)


def mystery_dir(letter: str, root: Path = HERE) -> Path:
    return Path(root) / f"mystery-{letter.lower()}"


def base_config() -> RunConfig:
    """What every mystery shares: EDiT with the penalty on, 1 shard × 4 replicas, random pauses everywhere."""
    return RunConfig(method="edit", shards=1, replicas=REPLICAS, steps=44, model="nano", seq_len=32, batch_size=4,
                     warmup_steps=4, sync_interval=4, eval_every=0, eval_batches=2, random_pause_prob=0.05,
                     random_pause_ms=20.0, progress=False)


def draw(seed: int) -> list[Mystery]:
    """The three troubles a seed picks: a permutation of the kinds over the letters, and each one's detail."""
    rng = random.Random(seed)
    kinds = list(KINDS)
    rng.shuffle(kinds)
    out = []
    for letter, kind in zip(LETTERS, kinds):
        if kind == "straggler":
            detail = {"replica": rng.randrange(REPLICAS), "factor": rng.choice(FACTORS)}
        elif kind == "bad_data":
            detail = {"replica": rng.randrange(REPLICAS)}
        else:
            detail = {"bandwidth_mb_s": rng.choice(BANDWIDTHS_MB_S)}
        out.append(Mystery(letter, kind, detail))
    return out


def config_of(m: Mystery, seed: int) -> RunConfig:
    """The run that shows mystery `m` (its run seed derives from the hidden seed and the letter)."""
    cfg = base_config().replace(seed=(seed * 7919 + LETTERS.index(m.letter)) % 2**31)
    if m.kind == "straggler":
        return cfg.replace(straggler_replicas=(m.detail["replica"],), straggler_factor=m.detail["factor"])
    if m.kind == "bad_data":
        return cfg.replace(corrupt_replica=m.detail["replica"], corrupt_from_step=24, corrupt_mode="random")
    return cfg.replace(link_latency_ms=LINK_LATENCY_MS, link_bandwidth_mb_s=m.detail["bandwidth_mb_s"])


def _canonical(kind: str, detail: dict[str, Any]) -> str:
    """One spelling of a diagnosis, so that 2, 2.0 and "2" hash alike."""
    norm = {k: (float(v) if k in ("factor", "bandwidth_mb_s") else int(v)) for k, v in sorted(detail.items())}
    return json.dumps([kind, norm], sort_keys=True)


def _digest(salt: str, kind: str, detail: dict[str, Any]) -> str:
    return hashlib.sha256(f"{salt}:{_canonical(kind, detail)}".encode()).hexdigest()


def _hide(conf: dict[str, Any], letter: str) -> dict[str, Any]:
    """A config.json with the trouble knobs (`HIDDEN_FIELDS`, by flag) reset to their defaults."""
    defaults = RunConfig()
    hidden = RunConfig.from_dict(conf).replace(**{name: defaults.get(name) for name in HIDDEN_FIELDS},
                                               out=f"edit_course/mysteries/mystery-{letter.lower()}")
    return hidden.to_dict()


def record(m: Mystery, seed: int, root: Path = HERE) -> Path:
    """Run mystery `m` for real and keep its files (events gzipped, trouble fields hidden, answer hashed)."""
    from edit_lab.runtime.launch import launch

    dest = mystery_dir(m.letter, root)
    with tempfile.TemporaryDirectory() as tmp:
        run = launch(config_of(m, seed).replace(out=str(Path(tmp) / "run")))
        rundir.ship(run.path, dest)
    conf = _hide(json.loads((dest / rundir.CONFIG).read_text()), m.letter)
    (dest / rundir.CONFIG).write_text(json.dumps(conf, indent=2, sort_keys=True))
    salt = os.urandom(8).hex()
    (dest / "mystery.json").write_text(json.dumps(
        {"letter": m.letter, "salt": salt, "answer_sha256": _digest(salt, m.kind, m.detail)}, indent=2))
    return dest


def make_mysteries(root: Path = HERE, seed: int | None = None) -> list[Path]:
    """Record all three mysteries; `seed` None draws a hidden one."""
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    return [record(m, seed, Path(root)) for m in draw(seed)]


def mysteries(root: Path = HERE) -> dict[str, Run]:
    """The recorded mysteries, by letter."""
    return {letter: Run(mystery_dir(letter, root)) for letter in LETTERS if (mystery_dir(letter, root) / "mystery.json").exists()}


DETAIL_FIELDS = {"straggler": ("replica", "factor"), "bad_data": ("replica",), "slow_link": ("bandwidth_mb_s",)}


def _refuse(kind: str, detail: dict[str, Any]) -> str | None:
    """Why a diagnosis is malformed (so a typo is not reported as a wrong answer), or None."""
    if kind not in KINDS:
        return f"kind must be one of {', '.join(KINDS)}; got {kind!r}"
    want = DETAIL_FIELDS[kind]
    if sorted(detail) != sorted(want):
        return f"a {kind} diagnosis names {', '.join(want)}; got {', '.join(sorted(detail)) or 'nothing'}"
    if "replica" in detail and detail["replica"] not in range(REPLICAS):
        return f"replica is one of 0..{REPLICAS - 1}"
    if "factor" in detail and float(detail["factor"]) not in FACTORS:
        return f"factor is one of {', '.join(map(str, FACTORS))}"
    if "bandwidth_mb_s" in detail and float(detail["bandwidth_mb_s"]) not in BANDWIDTHS_MB_S:
        return f"bandwidth_mb_s is one of {', '.join(map(str, BANDWIDTHS_MB_S))}"
    return None


def is_right(letter: str, kind: str, root: Path = HERE, **detail: Any) -> bool:
    """True when (kind, detail) is mystery `letter`'s trouble; ValueError for a malformed diagnosis."""
    why = _refuse(kind, detail)
    if why:
        raise ValueError(why)
    info = json.loads((mystery_dir(letter, root) / "mystery.json").read_text())
    return _digest(info["salt"], kind, detail) == info["answer_sha256"]


def check(letter: str, kind: str | None, root: Path = HERE, **detail: Any) -> bool:
    """A check cell's verdict, printed: right, wrong, malformed, or not answered yet (kind None)."""
    if kind is None:
        print(f"mystery {letter}: not answered yet")
        return False
    try:
        ok = is_right(letter, kind, root, **detail)
    except ValueError as e:
        print(f"mystery {letter}: not a diagnosis: {e}")
        return False
    said = ", ".join(f"{k}={v}" for k, v in sorted(detail.items()))
    print(f"mystery {letter}: {kind} ({said}) is " + ("right." if ok else "not it: look again."))
    return ok


def one_detail_changed(kind: str, detail: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The same diagnosis with one detail moved to another allowed value: what a check must refuse."""
    if kind == "straggler":
        return kind, {**detail, "factor": next(f for f in FACTORS if f != float(detail["factor"]))}
    if kind == "bad_data":
        return kind, {"replica": (int(detail["replica"]) + 1) % REPLICAS}
    return kind, {"bandwidth_mb_s": next(b for b in BANDWIDTHS_MB_S if b != float(detail["bandwidth_mb_s"]))}
