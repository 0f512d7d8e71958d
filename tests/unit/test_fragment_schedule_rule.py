"""A reader's fragment schedule (`RunConfig.rules.fragment_schedule`, edit_lab/rules/), refused before launch.

Each refusal names the field and says why the run could not go: the rule raises, answers a non-integer or a
fragment outside 0..P−1, answers differently when asked twice (the ranks would disagree), lands a fragment
before its pseudo-gradient could leave, lands two fragments closer than τ (two in flight), or never lands one;
and any method but streaming_diloco. The library's own schedule passes.
"""

from __future__ import annotations

import pytest

from edit_lab import ConfigError
from edit_lab.rules import RuleError, fragment_schedule, fragment_schedule_of, fragment_schedule_problem
from edit_lab.protocol import fragment_landing
from tests.helpers import small

LIBRARY = '''\
def landing(step, warmup, interval, fragments):
    every = interval // fragments
    if step <= warmup or (step - warmup) % every:
        return None
    return ((step - warmup) // every - 1) % fragments
'''

#: Fragments in reverse order (2, 1, 0, …), every H/P steps: valid, and not the library's.
REVERSED = '''\
def landing(step, warmup, interval, fragments):
    every = interval // fragments
    if step <= warmup or (step - warmup) % every:
        return None
    return fragments - 1 - ((step - warmup) // every - 1) % fragments
'''


def rule(body: str) -> str:
    return "def landing(step, warmup, interval, fragments):\n" + "".join(f"    {ln}\n" for ln in body.splitlines())


def streaming(**kw):
    """W = 2, H = 6, P = 3 (a landing every 2 steps), τ = 1: notebook 09's real run."""
    return small(**{**dict(method="streaming_diloco", shards=1, replicas=2, steps=14, sync_interval=6, fragments=3,
                           fragment_sync_delay=1), **kw})


def refused(cfg, *words: str) -> str:
    with pytest.raises(ConfigError) as e:
        cfg.validate()
    msg = str(e.value)
    assert msg.startswith("fragment_schedule_rule='def landing(step, warmup, interval, fragments):'"), msg
    for w in words:
        assert w in msg, msg
    return msg


def test_the_library_schedule_as_a_rule_is_accepted_and_answers_as_fragment_landing():
    streaming(fragment_schedule_rule=LIBRARY).validate()
    streaming(fragment_schedule_rule=REVERSED).validate()
    fn = fragment_schedule(LIBRARY)
    for w, h, p in ((0, 4, 2), (2, 6, 3), (3, 8, 4)):
        assert [fn(s, w, h, p) for s in range(40)] == [fragment_landing(s, w, h, p) for s in range(40)]
    assert fragment_schedule_of(None) is fragment_landing


@pytest.mark.parametrize("body, words", [
    ("return 1 / 0", ["fn(0, 2, 6, 3) raised ZeroDivisionError"]),
    ("return 0.5 if step > warmup + 1 else None", ["returned 0.5, not None or a fragment"]),
    ("return True if step > warmup + 1 else None", ["returned True, not None or a fragment"]),
    ("return 'a' if step > warmup + 1 else None", ["not None or a fragment"]),
    ("return 3 if step == 4 else None", ["fn(4, 2, 6, 3) returned fragment 3, outside 0..2"]),
    ("return -1 if step == 4 else None", ["returned fragment -1, outside 0..2"]),
    ("import random\nreturn random.choice([0, 1, 2]) if step > warmup + 1 else None",
     ["then", "every rank must take the same decision"]),
    ("return step % 3 if step > warmup else None", ["lands fragment 0 at step 3", "W + τ = 3",
                                                     "before the anchors exist"]),
    ("return None", ["fragment 0 never lands in steps 0..27"]),
    ("return 0 if step > 3 and step % 2 == 0 else None", ["fragment 1 never lands"]),
])
def test_a_rule_that_cannot_run_is_refused_naming_why(body, words):
    refused(streaming(fragment_schedule_rule=rule(body)), "is not allowed:", "W = 2, H = 6, P = 3, τ = 1", *words)


def test_two_landings_closer_than_the_delay_are_refused():
    # W = 2, H = 9, P = 3, τ = 2: a landing every step from 5 would send the next while one travels
    cfg = streaming(sync_interval=9, fragment_sync_delay=2, fragment_schedule_rule=rule(
        "return step % 3 if step > warmup + 2 else None"))
    refused(cfg, "lands fragment 2 at step 5 and fragment 0 at step 6, fewer than τ = 2 steps apart",
            "one fragment is in flight at a time")
    # τ apart is fine: the first lands, then the next leaves, at the same step
    streaming(sync_interval=9, fragment_sync_delay=2, fragment_schedule_rule=rule(
        "return (step // 2) % 3 if step > warmup + 2 and step % 2 == 0 else None")).validate()


def test_the_probe_covers_the_run_s_own_steps():
    late = rule("if step > 40:\n    raise ValueError('late')\n"
                "every = interval // fragments\n"
                "if step <= warmup or (step - warmup) % every:\n    return None\n"
                "return ((step - warmup) // every - 1) % fragments")
    streaming(fragment_schedule_rule=late).validate()  # 14 steps: the probe stops at W + τ + 4H = 27
    refused(streaming(steps=60, fragment_schedule_rule=late), "raised ValueError: late")


def test_only_streaming_diloco_takes_a_fragment_schedule():
    for method in ("diloco", "edit", "sync"):
        refused(small(method=method, fragment_schedule_rule=LIBRARY),
                f"is not allowed with method={method!r}", "streaming_diloco only")


def test_not_a_single_function_is_refused():
    with pytest.raises(ConfigError, match="must be one function defined with def"):
        streaming(fragment_schedule_rule="x = 1\n").validate()
    assert "does not parse" in fragment_schedule_problem("def (", 2, 6, 3, 1)


def test_the_wrapper_refuses_a_bad_answer_at_run_time():
    fn = fragment_schedule(rule("return 7"))
    with pytest.raises(RuleError, match="outside 0..2"):
        fn(5, 2, 6, 3)

