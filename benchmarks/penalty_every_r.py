"""D15 of docs/edit-method.md: which rule judges replicas at every R >= 2, chosen on one part of two replay sets and
reported on the other, as D11 was (`benchmarks/penalty_rule.py`).

Two replay sets, each split into seeds that choose and seeds held out:

- **made-up episodes** (`edit_course.panels.detector_series.replay_set`, seeds 0–4 choose, 5–9 held out): at R = 2, 3, 4
  and 8 (8 added after the choice),
  a bad replica's episode that ends (×1.6, ×2, ×3; 1, 3, 5 and 10 syncs), a ramp, an onset before the detector is
  armed, a norm that falls (×1/2, ×1/3) and a rise every replica shares. Measured: cases where a healthy replica
  is still flagged two syncs after the episode ended (locked out), healthy replica-syncs flagged, the bad
  replica's syncs flagged during abrupt post-arming episodes of ×2 and ×3, flags under the shared rise;
- **real norm series** (`benchmarks/results/penalty_rule_series.json`, D11's: seeds 0–1 choose, 2–3 held out),
  measured as `penalty_rule.tally` does.

The choice, on the choosing parts: no case locked out, no flag from a shared rise (either set), every spike
caught, at most 0.5 % of real healthy replica-syncs flagged; then the most of the real bad replica caught, then
the fewest healthy flags. Both sets are replayed with `penalty.replay_units`, the engine's own `judge_replicas`.

    python benchmarks/penalty_every_r.py    # about 3 minutes on one core; writes results/penalty_every_r.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import penalty_rule as pr  # noqa: E402

from edit_course.panels.detector_series import REPLAY_SEEDS, replay_set, score  # noqa: E402
from edit_lab.core.penalty import PenaltyConfig  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "penalty_every_r.json"
#: The widths of the made-up set: R = 8 joined after D15 was chosen (review-fidelity U9); its rows are reported,
#: the choice among the D15 settings is the same.
WIDTHS = (2, 3, 4, 8)


def candidates() -> dict[str, PenaltyConfig]:
    """The authors' detector, D10, D11 as first chosen, D11 with the entry test alone, then D15's grid."""
    out = {"authors' detector (α 0.02, E 120, G)": PenaltyConfig.authors(),
           "D10 (each unit on its own history)": PenaltyConfig(peers=False),
           "D11 as first chosen (κ_e 0, no memory)": PenaltyConfig(enter_ratio=0.0, memory_threshold=0.0,
                                                                   majority_ratio=0.0),
           "D11 + κ_e 1.3 (no memory)": PenaltyConfig(enter_ratio=1.3, memory_threshold=0.0, majority_ratio=0.0)}
    for ke in (1.2, 1.3):
        for dm in (0.5, 1.0, 1.5, 2.0):
            # D15 as it was decided: without D16's majority test (benchmarks/penalty_edges.py adds it)
            out[f"D15 κ_e {ke:g}, δ_m {dm:g}"] = PenaltyConfig(enter_ratio=ke, memory_threshold=dm,
                                                               majority_ratio=0.0)
    return out


def measure() -> list[dict[str, Any]]:
    rows = json.loads(pr.SERIES.read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    real_parts = {"choose": [r for r in rows if r["seed"] in pr.CHOOSE],
                  "held_out": [r for r in rows if r["seed"] in pr.HELD_OUT]}
    made = {part: replay_set(seeds, WIDTHS) for part, seeds in REPLAY_SEEDS.items()}
    out = []
    for label, cfg in candidates().items():
        entry: dict[str, Any] = {"label": label, "penalty": vars(cfg).copy()}
        closing = not label.startswith("authors")
        for part in ("choose", "held_out"):
            s = score(cfg, made[part])
            real = pr.measures(pr.tally(pr.Candidate(label, cfg, closing_judged_out=closing), real_parts[part]))
            entry[part] = {"cases": s.cases, "locked_out": s.locked_out, "healthy_closing": s.healthy_closing,
                           "healthy_flags": s.healthy_flags, "healthy_judged": s.healthy_judged,
                           "caught": s.caught, "episode_syncs": s.episode_syncs, "shared_flags": s.shared_flags,
                           "locked_by_shape": s.by_shape, "real": {k: v for k, v in real.items()
                                                                   if not k.endswith("by_config")}}
        out.append(entry)
    return out


def choose(results: list[dict[str, Any]]) -> dict[str, Any]:
    """D15's setting, chosen on the choosing parts (module docstring)."""
    ok = [e for e in results if e["label"].startswith("D15") and e["choose"]["locked_out"] == 0
          and e["choose"]["shared_flags"] == 0 and e["choose"]["real"]["shared_flagged"] == 0
          and e["choose"]["real"]["shared_unit_flagged"] == 0
          and e["choose"]["real"]["spike_caught"] == e["choose"]["real"]["spike"]
          and e["choose"]["real"]["healthy_share"] <= pr.MAX_HEALTHY]
    return max(ok, key=lambda e: (round(e["choose"]["real"]["bad_share"], 3),
                                  -(e["choose"]["healthy_flags"] + e["choose"]["real"]["healthy_flagged"])))


def table_lines(results: list[dict[str, Any]], chosen: str) -> list[str]:
    head = ("| rule | seeds | made-up: healthy locked out | healthy replica-syncs flagged | bad caught (abrupt ×2, ×3) "
            "| shared rise: flags | real: healthy flagged | real: bad left out | real: spike | real: shared ×2 |")
    lines = [head, "|" + "---|" * 10]
    for e in results:
        for part, seeds in (("choose", "0–4 / 0–1 (choose)"), ("held_out", "5–9 / 2–3 (held out)")):
            m, r = e[part], e[part]["real"]
            name = f"**{e['label']}**" if e["label"] == chosen else e["label"]
            caught = f"{m['caught'] / m['episode_syncs']:.0%}" if m["episode_syncs"] else "–"
            lines.append(f"| {name} | {seeds} | {m['locked_out']}/{m['cases']} | {m['healthy_flags']}/"
                         f"{m['healthy_judged']} | {caught} | {m['shared_flags']} | {r['healthy_flagged']}/"
                         f"{r['healthy']} | {r['bad_share']:.1%} | {r['spike_caught']}/{r['spike']} | "
                         f"{r['shared_flagged']} |")
    return lines


def main() -> None:
    results = measure()
    chosen = choose(results)["label"]
    RESULT.write_text(json.dumps({"chosen": chosen, "results": results}, indent=1, ensure_ascii=False) + "\n")
    print("\n".join(table_lines(results, chosen)))
    print(f"\nchosen: {chosen}")


if __name__ == "__main__":
    main()
