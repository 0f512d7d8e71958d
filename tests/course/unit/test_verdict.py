"""The verdict lines a lesson prints about its own run, and how the runner and the tests read them back."""

from __future__ import annotations

from edit_course.verdict import count, notebook_verdicts, parse, verdict


def test_a_verdict_prints_its_numbers_and_on_failure_its_likely_reason(capsys):
    ok = verdict("EDiT exposes less than DiLoCo", True, "43 ms against 95 ms", why_not="few cores")
    bad = verdict("A-EDiT trains more tokens than EDiT", False, "17,654 against 17,799", why_not="two cores for four ranks",
                  timing=True)
    printed = capsys.readouterr().out.splitlines()
    assert printed == [ok.line(), bad.line()]
    assert printed[0] == "✓ EDiT exposes less than DiLoCo: 43 ms against 95 ms"  # no reason when it holds
    assert printed[1] == ("✗ A-EDiT trains more tokens than EDiT (a timing of this machine): 17,654 against 17,799. "
                          "Likely reason: two cores for four ranks")
    assert parse("\n".join(printed) + "\nsome other line\n ✓ indented is not a verdict") == [
        (True, False, printed[0]), (False, True, printed[1])]


def test_an_executed_notebook_is_counted_from_its_stdout_only():
    cells = [{"cell_type": "markdown", "source": "✓ prose is no verdict"},
             {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout", "text": ["✓ a: 1\n", "✗ b: 2\n"]}]},
             {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stderr", "text": "✗ c: warning\n"}]},
             {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout", "text": "✗ d (a timing of this machine): 3\n"}]}]
    nb = {"cells": cells}
    assert [(i, ok, timing) for i, ok, timing, _ in notebook_verdicts(nb)] == [(1, True, False), (1, False, False),
                                                                            (3, False, True)]
    assert count(nb) == (1, 2)
