"""Which rank the launcher blames for a failed run (`launch._first_failure`), from hand-written error files.

The multi-process tests (tests/distributed/test_failures.py) show the blame end to end for a few real
failures; here each rule of the order in `_first_failure`'s docstring gets its own case, with the error
files, their order and the exit codes chosen by hand, so a change of the rules shows up in a second.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from edit_lab.runtime.launch import _describe_exit, _first_failure, _is_peer_loss

GLOO_TIMEOUT = ("Traceback (most recent call last):\n  File \"worker.py\", line 1, in <module>\n"
                "torch.distributed.DistBackendError: [../gloo/transport/tcp/pair.cc:534] Read error: "
                "Connection reset by peer\n")
OWN_ERROR = ("Traceback (most recent call last):\n  File \"worker.py\", line 1, in <module>\n"
             "FloatingPointError: loss is nan at step 7\n")


@dataclass
class Exited:
    """What `_first_failure` reads of a worker: `poll()`, None while it runs, else its exit code."""

    code: int | None

    def poll(self) -> int | None:
        return self.code


def write_error(out: Path, rank: int, text: str, mtime: float) -> None:
    path = out / f"error-rank{rank}.txt"
    path.write_text(text)
    os.utime(path, (mtime, mtime))


@pytest.mark.parametrize("text, lost", [
    (GLOO_TIMEOUT, True),
    ("RuntimeError: Socket Timeout\n", True),
    ("torch.distributed.DistNetworkError: Connection refused\n", True),
    ("Traceback:\n  ... timeout in the message of an earlier line\nValueError: bad shape\n", False),
    (OWN_ERROR, False),
    ("", False),
])
def test_only_the_last_line_says_whether_a_peer_was_lost(text, lost):
    assert _is_peer_loss(text) is lost


def test_an_own_error_is_blamed_even_when_a_witness_wrote_first(tmp_path):
    write_error(tmp_path, 0, GLOO_TIMEOUT, mtime=1000.0)  # the witness wrote first
    write_error(tmp_path, 2, OWN_ERROR, mtime=1001.0)
    write_error(tmp_path, 1, GLOO_TIMEOUT, mtime=1002.0)
    rank, tb = _first_failure(tmp_path, [Exited(1), Exited(1), Exited(1)], settle_s=0.0)
    assert (rank, tb) == (2, OWN_ERROR)


def test_of_two_own_errors_the_earlier_one_is_blamed(tmp_path):
    write_error(tmp_path, 3, OWN_ERROR, mtime=1000.0)
    write_error(tmp_path, 0, "ValueError: later\n", mtime=1005.0)
    assert _first_failure(tmp_path, [Exited(1)] * 4, settle_s=0.0)[0] == 3


def test_a_rank_killed_without_a_traceback_is_blamed_with_its_log_tail(tmp_path):
    write_error(tmp_path, 0, GLOO_TIMEOUT, mtime=1000.0)
    (tmp_path / "rank1.log").write_text("step 5\nstep 6\n")
    rank, text = _first_failure(tmp_path, [Exited(1), Exited(-9)], settle_s=0.0)
    assert rank == 1
    assert text.startswith("killed by signal SIGKILL (9) without a Python traceback")
    assert text.endswith("step 5\nstep 6\n")


def test_a_rank_still_running_after_its_peers_lost_it_is_blamed_as_hung(tmp_path):
    for r in (0, 1, 3):
        write_error(tmp_path, r, GLOO_TIMEOUT, mtime=1000.0 + r)
    (tmp_path / "rank2.log").write_text("entered the sync at step 12\n")
    rank, text = _first_failure(tmp_path, [Exited(1), Exited(1), Exited(None), Exited(1)], settle_s=5.0)
    assert rank == 2
    assert text.startswith("rank 2 never arrived")
    assert "entered the sync at step 12" in text and GLOO_TIMEOUT in text  # its log, then the first witness


def test_several_ranks_still_running_once_the_settle_time_is_over_are_named_together(tmp_path):
    write_error(tmp_path, 0, GLOO_TIMEOUT, mtime=1000.0)
    rank, text = _first_failure(tmp_path, [Exited(1), Exited(None), Exited(None)], settle_s=0.0)
    assert rank == 1 and text.startswith("ranks 1, 2 never arrived")


def test_when_every_rank_lost_its_peers_the_earliest_error_is_blamed(tmp_path):
    write_error(tmp_path, 1, GLOO_TIMEOUT + "(rank 1)", mtime=1000.0)
    write_error(tmp_path, 0, GLOO_TIMEOUT + "(rank 0)", mtime=1003.0)
    assert _first_failure(tmp_path, [Exited(1), Exited(1)], settle_s=0.0) == (1, GLOO_TIMEOUT + "(rank 1)")


def test_no_error_file_and_no_failed_exit_is_an_unknown_failure(tmp_path):
    assert _first_failure(tmp_path, [Exited(0), Exited(0)], settle_s=0.0) == (-1, "unknown failure")


@pytest.mark.parametrize("code, text", [
    (3, "exit code 3"),
    (-15, "killed by signal SIGTERM (15)"),
    (-200, "killed by signal 200"),
])
def test_exit_codes_are_described_for_a_reader(code, text):
    assert _describe_exit(code) == text
