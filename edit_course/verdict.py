"""Every claim a lesson makes about its own run, computed from that run and printed as a verdict.

A notebook never states an outcome the cell below might not show. Where the text says something about
the run just made (a ranking, a ratio, "caught", "never flagged", "hidden", "waits less"), the cell
computes it and calls `verdict`, which prints one line:

    ✓ EDiT exposes less sync time than DiLoCo: 43 ms against 95 ms per sync
    ✗ A-EDiT trains more tokens than EDiT: 17,654 against 17,799 tokens/s. Likely reason: four ranks share two cores

A claim about wall-clock time is marked `timing=True`: its outcome depends on the machine (cores per
rank, load), so its ✗ line says so, and the tests, which run on busy machines, require a ✓ of every
other claim only (tests/notebooks). `make notebooks` counts the ✓ and ✗ of every notebook at its
defaults (`count`), which is how a lesson whose own claims do not hold is found.
"""

from __future__ import annotations

from dataclasses import dataclass

PASS, FAIL = "✓", "✗"
TIMING_NOTE = "(a timing of this machine)"


@dataclass(frozen=True)
class Verdict:
    """One claim about a run: what is claimed, whether the run shows it, and the numbers that decide it."""

    claim: str
    ok: bool
    numbers: str
    why_not: str = ""
    timing: bool = False

    def line(self) -> str:
        if self.ok:
            return f"{PASS} {self.claim}: {self.numbers}"
        reason = f". Likely reason: {self.why_not}" if self.why_not else ""
        note = f" {TIMING_NOTE}" if self.timing else ""
        return f"{FAIL} {self.claim}{note}: {self.numbers}{reason}"


def verdict(claim: str, ok: bool, numbers: str, why_not: str = "", timing: bool = False) -> Verdict:
    """Print and return the verdict on `claim` (`ok`: the run shows it; `numbers`: what decided it;
    `why_not`: the likely reason, printed only when it does not hold; `timing`: it depends on this machine)."""
    v = Verdict(claim, bool(ok), numbers, why_not, timing)
    print(v.line(), flush=True)
    return v


def parse(text: str) -> list[tuple[bool, bool, str]]:
    """The verdict lines in a cell's printed output: (ok, timing, line) for each."""
    found = []
    for line in text.splitlines():
        if line.startswith(PASS + " "):
            found.append((True, False, line))
        elif line.startswith(FAIL + " "):
            found.append((False, TIMING_NOTE in line, line))
    return found


def notebook_verdicts(executed: dict) -> list[tuple[int, bool, bool, str]]:
    """Every verdict an executed notebook (its JSON) printed: (cell index, ok, timing, line)."""
    out = []
    for i, cell in enumerate(executed.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stdout":
                text = o["text"] if isinstance(o["text"], str) else "".join(o["text"])
                out.extend((i, ok, timing, line) for ok, timing, line in parse(text))
    return out


def count(executed: dict) -> tuple[int, int]:
    """(✓, ✗) printed by an executed notebook."""
    found = notebook_verdicts(executed)
    return sum(ok for _, ok, _, _ in found), sum(not ok for _, ok, _, _ in found)
