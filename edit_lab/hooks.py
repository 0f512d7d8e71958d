"""A reader's own rule, run by every rank of a real run: a function written in a notebook, shipped as source.

Why source and not the function itself: the ranks are fresh processes, and a function defined in a notebook
cell lives in the kernel's `__main__`, which no other process can import or unpickle. Its source text is
plain data: it travels in the `RunConfig` (so `config.json` records what ran), every rank compiles it once,
and a rule that cannot work is refused before any process starts, like every other knob.

These rules are pluggable:
- the penalty's **weighting** (`RunConfig.penalty_weighting_rule`, notebook 05's exercise), which replaces
  `penalty.softmax_weights` at every sync of EDiT and A-EDiT, on every rank. The rule is called with the
  library's own inputs (the norms, per step when `penalty_weight_per_step`, the temperature T and the anomaly
  decisions), so a rule equal to the softmax gives the library's run;
- a **straggler** kind (`RunConfig.straggler_rule`, notebook 06's exercise): `fn(step, replica, compute_s)`,
  the seconds that replica pauses after that step, whose own compute took `compute_s` (0: no pause). Every
  rank calls it after every step (`stragglers.StragglerModel.delay`, reason "rule"), on top of the consistent
  and random stragglers; on the virtual clock `compute_s` is the calibrated compute of a step.
- the **sync group** (`RunConfig.sync_group_rule`, notebook 03's exercise): `fn(rank, shards, replicas) -> list
  of ranks`, the sync group of that rank. Every rank calls it for every rank of the mesh (`sync_groups`) and
  creates every group it gives, in the same order, instead of `mesh.Mesh`'s columns. Refused before launch
  (`sync_groups_problem`) when it raises, answers anything but whole ranks of the mesh, or its groups are not a
  partition into groups of `replicas` ranks on which every member agrees (the collectives would hang). A valid
  partition that is the wrong one runs: it averages shards that hold different parameters. Only with A-EDiT or
  a time budget, where the replicas agree over the sync group on when to sync or stop, a partition whose groups
  do not hold one rank of every replica is refused too (its groups could take different decisions and hang).
- the **outer step** (`RunConfig.outer_step_rule`, notebook 02's exercise): `fn(anchor, delta_bar, buf, lr,
  momentum) -> (new_anchor, new_buf)`, called by every rank for its shard of each unit at every sync instead of
  torch's SGD (`outer.OuterState.step`; diloco, edit and aedit only), with copies of the anchor shard, the
  averaged pseudo-gradient Δ̄ and the momentum buffer (zeros before the first step), and the configured
  `outer_lr` and `outer_momentum`. What it returns becomes the anchor and the momentum buffer (checkpointed as
  the optimizer's), so a rule equal to torch's Nesterov SGD gives the library's run. `torch` is provided to it
  as `math` is; it is probed on small tensors before any process starts.
- the **gradient all-reduce** (`RunConfig.grad_all_reduce_rule`, notebook 01's exercise): `fn(grad, reduce_scatter,
  all_gather) -> tensor`, called by every rank for each unit's gradient shard, at every step in which the method
  all-reduces gradients over the sync group (sync, and the warm-up of the local-SGD methods), instead of the
  built-in all-reduce (`methods.base.Method.all_reduce_grads_over_sync_group`). `grad` is the rank's flat shard,
  zero-padded to a multiple of the replicas R; `reduce_scatter(t)` returns this rank's slice of the **mean** over
  the sync group (as `Comm.reduce_scatter`), `all_gather(t)` every member's `t` concatenated; both are the run's
  real collectives, recorded as `grad_all_reduce` events of the unit. What it returns (grad's shape) becomes
  the rank's gradient, so `all_gather(reduce_scatter(grad))` gives the built-in run up to float rounding. Probed
  before any process starts on R stand-in replicas (threads with in-process collectives, `StandInGroup`): one
  that fails or answers the wrong shape is refused; one that answers wrong numbers runs.
- the **layer-wise sync order** (`RunConfig.sync_schedule_rule`, notebook 04's exercise): `fn(n_units) -> list of
  (kind, unit)`, kind "issue" (start the unit's `sync_reduce`), "wait" (`finish`: wait for it, step the anchor,
  θ ← a), "all_gather" or "compute", one EDiT/A-EDiT sync step's forward on every rank. Every rank runs the
  issues and waits listed between ("all_gather", l−1) and ("all_gather", l) in unit l's pre-forward, in the
  listed order, instead of `prefetch`'s (`sync_schedule_plan`); "compute" is ignored (a unit computes right
  after its all-gather). Refused before launch when it cannot run without a hang or a crash (a unit not issued
  and waited for exactly once, a wait before its issue, all-gathers not 0..n−1 in order, an issue or wait after
  the last all-gather, an unknown kind, fn raising or answering a non-list). A unit gathered before its wait
  runs (its wait moves to a later unit's pre-forward; the shard is reset in place): the run shows the damage.
- the **fragment schedule** (`RunConfig.fragment_schedule_rule`, notebook 09's exercise): `fn(step, warmup,
  interval, fragments) -> fragment or None`, the fragment whose outer step lands at the start of `step`;
  streaming_diloco only. Every rank calls it with the run's W, H and P instead of `schedule.fragment_landing`
  (at step + τ, to send that fragment's pseudo-gradient τ = `fragment_sync_delay` steps before it lands), and so
  does the simulator's twin; a pure function of the step and the config, so every rank takes the same decision.
  Refused before launch (`fragment_schedule_problem`, probed on the run's steps) when it raises, answers anything
  but None or a fragment 0..P−1, answers differently when asked twice, lands a fragment at or before step W + τ
  (it would leave before the anchors exist), lands two fragments fewer than τ steps apart (the second would
  leave while the first travels: Streaming DiLoCo has one fragment in flight), or leaves a fragment that never
  lands. A valid schedule that is not the library's runs: the run shows which fragments landed when.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import threading
from collections.abc import Callable, Sequence

WEIGHTING_SIGNATURE = "fn(norms, temperature, anomalous) -> one weight per replica"
STRAGGLER_SIGNATURE = "fn(step, replica, compute_s) -> seconds of pause (0 for none)"
OUTER_STEP_SIGNATURE = "fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf)"

Weighting = Callable[[Sequence[float], float, Sequence[bool]], list[float]]
Straggler = Callable[[int, int, float], float]


class RuleError(ValueError):
    """A rule that cannot be run: not a single function, or one that fails or answers in the wrong shape."""


def rule_source(fn: Callable) -> str:
    """The source of `fn`, ready for a RunConfig: a function defined with `def` in a cell or a module.

    Refused: a lambda (its source is the whole line it sits in) and a function that reads variables of an
    enclosing function (they would not exist on the ranks). Module-level names it uses must be imported
    inside the function, or be `math`, which every rank provides (and `torch`, to an outer step rule).
    """
    if not inspect.isfunction(fn):
        raise RuleError(f"expected a function defined with def, got {type(fn).__name__}")
    if fn.__name__ == "<lambda>":
        raise RuleError("a lambda cannot be shipped to the ranks: define the rule with def")
    if fn.__code__.co_freevars:
        raise RuleError(f"{fn.__name__} reads {', '.join(fn.__code__.co_freevars)} of an enclosing function, which "
                        f"the ranks do not have: define it at the top level of a cell")
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise RuleError(f"the source of {fn.__name__} cannot be read ({e}): define it in a cell or a file") from e


#: One `ast.parse` (or compile of a tree) at a time in this process. The virtual clock runs every rank as a thread
#: of one process, and each compiles its rule at the same moment; CPython 3.11 keeps the AST constructor's
#: recursion depth in state the threads share, so two parses at once can fail with "SystemError: AST constructor
#: recursion depth mismatch" (python/cpython#106905; seen in `make test` on 2026-12-04).
_PARSING = threading.Lock()


def load_rule(source: str, what: str = "rule", names: dict | None = None) -> Callable:
    """Compile `source` (exactly one top-level `def`; imports may precede it) and return that function.

    `names`: modules the rule may use without importing them, besides `math` (the outer step's: `torch`)."""
    if not isinstance(source, str):
        raise RuleError(f"the {what} must be Python source text, got {type(source).__name__}")
    try:
        with _PARSING:
            tree = ast.parse(source)
    except SyntaxError as e:
        raise RuleError(f"the {what} does not parse: {e.msg} (line {e.lineno})") from e
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    others = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.Import, ast.ImportFrom))]
    if len(defs) != 1 or others:
        raise RuleError(f"the {what} must be one function defined with def (imports may come first), "
                        f"found {len(defs)} function(s) and {len(others)} other statement(s)")
    namespace: dict = {"math": math, **(names or {}), "__name__": "edit_lab_rule"}
    with _PARSING:  # compiling a tree walks it back with the same shared depth
        code = compile(tree, f"<{what}>", "exec")
    exec(code, namespace)  # noqa: S102 - the reader's own code, on their own machine
    return namespace[defs[0].name]


def weighting(source: str) -> Weighting:
    """The weighting rule as every rank calls it: its answer as floats, one per replica, each finite and >= 0."""
    fn = load_rule(source, "weighting rule")

    def weights(norms: Sequence[float], temperature: float, anomalous: Sequence[bool]) -> list[float]:
        got = fn(list(norms), temperature, list(anomalous))
        try:
            out = [float(w) for w in got]
        except TypeError as e:
            raise RuleError(f"the weighting rule returned {got!r}, not a list of numbers") from e
        if len(out) != len(norms):
            raise RuleError(f"the weighting rule returned {len(out)} weights for {len(norms)} replicas")
        if not all(math.isfinite(w) and w >= 0.0 for w in out):
            raise RuleError(f"the weighting rule returned {out}: every weight must be finite and >= 0")
        return out

    return weights


def weighting_problem(source: str) -> str | None:
    """Why the weighting rule cannot run (None when it can), found by calling it on two healthy replicas and on
    one flagged replica, before any process starts."""
    try:
        rule = weighting(source)
        rule([1.0, 2.0], 1.0, [False, False])
        rule([1.0, 2.0, 1.5], 1.0, [False, True, False])
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{WEIGHTING_SIGNATURE}; it fails: {type(e).__name__}: {e}"
    return None


def straggler(source: str) -> Straggler:
    """The straggler rule as every rank calls it: its answer as a float, finite and >= 0 (0: no pause)."""
    fn = load_rule(source, "straggler rule")

    def pause_s(step: int, replica: int, compute_s: float) -> float:
        got = fn(int(step), int(replica), float(compute_s))
        if isinstance(got, bool) or got is None:
            raise RuleError(f"the straggler rule returned {got!r}, not a number of seconds")
        try:
            out = float(got)
        except (TypeError, ValueError) as e:
            raise RuleError(f"the straggler rule returned {got!r}, not a number of seconds") from e
        if not (math.isfinite(out) and out >= 0.0):
            raise RuleError(f"the straggler rule returned {out}: a pause must be finite and >= 0 seconds")
        return out

    return pause_s


def straggler_problem(source: str) -> str | None:
    """Why the straggler rule cannot run (None when it can), found by calling it on a few steps of two replicas,
    with and without compute, before any process starts."""
    try:
        rule = straggler(source)
        for step in (0, 1, 2, 7):
            for replica in (0, 1):
                for compute_s in (0.0, 0.01, 0.25):
                    rule(step, replica, compute_s)
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{STRAGGLER_SIGNATURE}; it fails: {type(e).__name__}: {e}"
    return None


# ------------------------------------------------------------------------------- the gradient all-reduce
GRAD_ALL_REDUCE_SIGNATURE = "fn(grad, reduce_scatter, all_gather) -> the gradient after the all-reduce"


def _shown(x: object, limit: int = 80) -> str:
    text = " ".join(repr(x).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def grad_all_reduce(source: str) -> Callable:
    """The gradient all-reduce rule as every rank calls it, once per unit and step (`methods.base.Method`):
    `reduce(grad, reduce_scatter, all_gather) -> tensor`, the reader's answer checked to be a floating tensor of
    grad's shape (what it does to `grad` in place does not count: it is handed a copy).

    `grad`: this rank's flat gradient shard of the unit, zero-padded to a multiple of the replicas R;
    `reduce_scatter(t)`: this rank's slice (1/R of `t`, in replica order) of the **mean** over the sync group of
    every member's `t`; `all_gather(t)`: every member's `t`, concatenated in replica order. `torch` is provided
    to the rule as `math` is."""
    import torch

    fn = load_rule(source, "gradient all-reduce rule", names={"torch": torch})

    def reduce(grad, reduce_scatter: Callable, all_gather: Callable):
        got = fn(grad.clone(), reduce_scatter, all_gather)
        if not isinstance(got, torch.Tensor):
            raise RuleError(f"it returned {_shown(got)}, not a tensor")
        if not got.is_floating_point():
            raise RuleError(f"it returned a tensor of {got.dtype}, not of floating point numbers")
        if tuple(got.shape) != tuple(grad.shape):
            part = (f" ({grad.numel() // got.numel()}× too few values: a reduce-scatter leaves each rank only its "
                    f"slice of the mean, and every rank needs all of it)"
                    if 0 < got.numel() < grad.numel() and grad.numel() % got.numel() == 0 else "")
            raise RuleError(f"it returned shape {tuple(got.shape)} for a gradient of shape {tuple(grad.shape)}{part}")
        return got.detach()

    return reduce


class _GroupError(RuleError):
    """Raised by a stand-in collective on every member at once (they called it differently): nobody is left
    waiting, so no member's wait needs to be broken."""


class StandInGroup:
    """The sync group's two collectives for `n` replicas that are threads of this process: what validation probes
    a gradient all-reduce rule with, before any process starts (`grad_all_reduce_problem`).

    Each member calls `reduce_scatter(rank)(t)` / `all_gather(rank)(t)` as the run's ranks call theirs; a call
    returns once every member has made it, with the same answers as the run's collectives (the mean, sliced)."""

    def __init__(self, n: int, timeout_s: float = 5.0) -> None:
        import threading

        self.n = n
        self.barrier = threading.Barrier(n, timeout=timeout_s)
        self.inbox: list = [None] * n

    def _exchange(self, rank: int, t: object, what: str) -> list:
        import torch

        if not isinstance(t, torch.Tensor):
            raise RuleError(f"{what} was handed {_shown(t)}, not a tensor")
        self.inbox[rank] = (what, t.detach().reshape(-1).clone())
        self.barrier.wait()
        called, ins = zip(*self.inbox)
        self.barrier.wait()  # everyone has read: the next collective may overwrite the inbox
        if len(set(called)) > 1:
            raise _GroupError(f"the replicas called different collectives at once ({', '.join(called)}, in replica "
                            f"order; a run would hang): every rank must call the same ones, in the same order")
        sizes = sorted({x.numel() for x in ins})
        if len(sizes) > 1:
            raise _GroupError(f"{what} was handed tensors of different sizes by the replicas ({sizes})")
        return ins

    def reduce_scatter(self, rank: int) -> Callable:
        def reduce_scatter(t):
            import torch

            ins = self._exchange(rank, t, "reduce_scatter")
            k, left = divmod(ins[0].numel(), self.n)
            if left:
                raise _GroupError(f"reduce_scatter was handed {ins[0].numel()} values, which {self.n} replicas cannot "
                                f"split evenly")
            return torch.stack(ins).mean(0)[rank * k:(rank + 1) * k].clone()

        return reduce_scatter

    def all_gather(self, rank: int) -> Callable:
        def all_gather(t):
            import torch

            return torch.cat(self._exchange(rank, t, "all_gather"))

        return all_gather


def on_stand_ins(rule: Callable, grads: Sequence, timeout_s: float = 5.0) -> list:
    """`rule(grad, reduce_scatter, all_gather)` called by every replica of a `StandInGroup` (one thread each, one
    gradient each): their answers, or a RuleError naming the replica whose own call failed."""
    import threading

    n = len(grads)
    group = StandInGroup(n, timeout_s)
    answers: list = [None] * n
    errors: list[BaseException | None] = [None] * n

    def member(r: int) -> None:
        try:
            answers[r] = rule(grads[r], group.reduce_scatter(r), group.all_gather(r))
        except BaseException as e:  # noqa: BLE001 - reported below, with the replica
            errors[r] = e
            if not isinstance(e, _GroupError):  # the others raised it too; else they leave the collective they wait in
                group.barrier.abort()

    threads = [threading.Thread(target=member, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3 * timeout_s)
    if any(t.is_alive() for t in threads):
        group.barrier.abort()
        raise RuleError(f"it did not return within {3 * timeout_s:g} s")
    own = [(r, e) for r, e in enumerate(errors) if e is not None and not isinstance(e, threading.BrokenBarrierError)]
    if own:
        r, e = own[0]
        raise RuleError(f"on replica {r} of {n}: {e if isinstance(e, RuleError) else f'{type(e).__name__}: {e}'}") from e
    if any(e is not None for e in errors):
        raise RuleError("the replicas called the collectives a different number of times (a run would hang): every "
                        "rank must call the same collectives, in the same order")
    return answers


def grad_all_reduce_problem(source: str, replicas: int = 2) -> str | None:
    """Why the gradient all-reduce rule cannot run (None when it can), found by calling it on `replicas` stand-in
    replicas (threads of this process, `StandInGroup`) for gradients of 4·R and 6·R values, before any process
    starts: it must not fail, and must return a floating tensor of the gradient's shape on every replica. Its
    values are not judged here: a rule that answers the wrong numbers runs (the exercise's check judges the run)."""
    try:
        import torch

        rule = grad_all_reduce(source)
        n = max(2, int(replicas))
        gen = torch.Generator().manual_seed(0)
        for length in (4 * n, 6 * n):
            on_stand_ins(rule, [torch.randn(length, generator=gen) for _ in range(n)])
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{GRAD_ALL_REDUCE_SIGNATURE}; it fails: {type(e).__name__}: {e}"
    return None


SYNC_GROUP_SIGNATURE = "fn(rank, shards, replicas) -> list of ranks (the sync group of that rank)"


def sync_group(source: str) -> Callable[[int, int, int], list[int]]:
    """The sync-group rule as every rank calls it: its answer as a sorted list of ints (whole numbers only)."""
    import numbers

    fn = load_rule(source, "sync-group rule")

    def members(rank: int, shards: int, replicas: int) -> list[int]:
        got = fn(int(rank), int(shards), int(replicas))
        if got is None or isinstance(got, (str, bytes, dict)):
            raise RuleError(f"the sync-group rule returned {got!r} for rank {rank}, not a list of ranks")
        try:
            items = list(got)
        except TypeError as e:
            raise RuleError(f"the sync-group rule returned {got!r} for rank {rank}, not a list of ranks") from e
        out = []
        for x in items:
            if isinstance(x, float) and x.is_integer():
                x = int(x)
            if isinstance(x, bool) or not isinstance(x, numbers.Integral):
                raise RuleError(f"the sync-group rule returned {got!r} for rank {rank}: {x!r} is not a rank")
            out.append(int(x))
        return sorted(out)

    return members


def sync_groups(source: str, shards: int, replicas: int) -> list[list[int]]:
    """Every sync group the rule gives on an S × R mesh, each sorted, ordered by its smallest rank: the order in
    which every rank creates them (for the mesh's own groups, the order `Mesh.build` uses: shard 0, 1, …).

    RuleError when the rule raises, answers anything but ranks of the mesh, or its groups are not a partition of
    the S·R ranks into groups of `replicas` ranks in which every member gives the same group."""
    rule = sync_group(source)
    world = shards * replicas
    of = {}
    for rank in range(world):
        try:
            of[rank] = rule(rank, shards, replicas)
        except RuleError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
            raise RuleError(f"fn({rank}, {shards}, {replicas}) raised {type(e).__name__}: {e}") from e
    for rank, group in of.items():
        where = f"fn({rank}, {shards}, {replicas}) = {group}"
        if len(set(group)) != len(group):
            raise RuleError(f"{where} names a rank twice")
        if not all(0 <= m < world for m in group):
            raise RuleError(f"{where} names a rank outside the mesh's 0..{world - 1}")
        if rank not in group:
            raise RuleError(f"{where} does not contain rank {rank} itself")
        if len(group) != replicas:
            raise RuleError(f"{where} has {len(group)} ranks: a sync group holds one rank per replica, "
                            f"{replicas} on this mesh")
        for m in group:
            if of[m] != group:
                raise RuleError(f"{where} but fn({m}, {shards}, {replicas}) = {of[m]}: every member of a group must "
                                f"give the same group, or the collectives would wait forever")
    return sorted((list(g) for g in {tuple(g) for g in of.values()}), key=lambda g: g[0])


def one_rank_per_replica(groups: Sequence[Sequence[int]], shards: int) -> bool:
    """Does every group hold one rank of every replica (it may pair different shard indices)?"""
    return all(len({m // shards for m in g}) == len(g) for g in groups)


def sync_groups_problem(source: str, shards: int, replicas: int, timed: bool = False) -> str | None:
    """Why the sync-group rule cannot run on an S × R mesh (None when it can), found by calling it for every rank
    before any process starts. `timed`: A-EDiT or a time budget, where the replicas decide over the sync group
    when to sync or stop, so that a group holding two ranks of one replica could decide unlike the others."""
    try:
        groups = sync_groups(source, shards, replicas)
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{SYNC_GROUP_SIGNATURE}; it fails on the {shards}×{replicas} mesh: {type(e).__name__}: {e}"
    if timed and not one_rank_per_replica(groups, shards):
        bad = next(g for g in groups if len({m // shards for m in g}) != len(g))
        return (f"{SYNC_GROUP_SIGNATURE}; its group {bad} holds two ranks of one replica, which A-EDiT and time "
                f"budgets cannot run (the replicas agree over the sync group on when to sync and stop)")
    return None


def outer_step(source: str) -> Callable:
    """The outer-step rule as every rank calls it on one unit's anchor shard: `step(anchor, delta_bar, buf, lr,
    momentum) -> (new_anchor, new_buf)`, two tensors of the anchor's dtype, device and shape.

    The reader's function gets copies (only what it returns counts, whatever it does in place) and the lr and
    momentum as floats; a pair of anything `torch.as_tensor` reads (a tensor, a list of numbers) is accepted."""
    import torch

    fn = load_rule(source, "outer step rule", names={"torch": torch})

    def step(anchor, delta_bar, buf, lr: float, momentum: float):
        got = fn(anchor.clone(), delta_bar.clone(), buf.clone(), float(lr), float(momentum))
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            shown = " ".join(repr(got).split())
            raise RuleError(f"the outer step rule returned {shown[:80]}, not the pair (new_anchor, new_buf)")
        out = []
        for what, x in zip(("new anchor", "new buffer"), got):
            try:
                t = torch.as_tensor(x, dtype=anchor.dtype, device=anchor.device)
            except Exception as e:  # noqa: BLE001 - None, a string, an object: not values
                raise RuleError(f"the outer step rule returned a {what} of type {type(x).__name__}, not a "
                                f"tensor") from e
            if t.shape != anchor.shape:
                raise RuleError(f"the outer step rule returned a {what} of shape {tuple(t.shape)} for an anchor "
                                f"shard of shape {tuple(anchor.shape)}: both must have the anchor's shape")
            out.append(t.detach())
        return out[0], out[1]

    return step


def outer_step_problem(source: str, lr: float = 0.7, momentum: float = 0.8) -> str | None:
    """Why the outer-step rule cannot run (None when it can), found by calling it for three steps on a 5-value and
    a 1-value anchor shard (the buffer starting at zeros), with the run's lr and momentum, before any process
    starts: it must not fail, must return two tensors of the anchor's shape, and finite ones for finite inputs."""
    try:
        import torch

        rule = outer_step(source)
        deltas = ([0.2, -0.1, 0.05, 0.0, 1.0], [0.1, 0.1, -0.2, 0.3, -0.5], [0.3, 0.0, 0.1, -0.1, 0.2])
        for n in (5, 1):
            anchor, buf = torch.linspace(-1.0, 1.0, n), torch.zeros(n)
            for d in deltas:
                new_anchor, new_buf = rule(anchor, torch.tensor(d[:n]), buf, lr, momentum)
                if not (bool(torch.isfinite(new_anchor).all()) and bool(torch.isfinite(new_buf).all())):
                    raise RuleError(f"the outer step rule returned non-finite values for finite inputs "
                                    f"({new_anchor.tolist()}, {new_buf.tolist()})")
                anchor, buf = new_anchor, new_buf
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{OUTER_STEP_SIGNATURE}; it fails: {type(e).__name__}: {e}"
    return None


# ------------------------------------------------------------------------------- the layer-wise sync order
SYNC_SCHEDULE_SIGNATURE = "fn(n_units) -> list of (kind, unit) operations, kind one of issue, wait, all_gather, compute"
SCHEDULE_KINDS = ("issue", "wait", "all_gather", "compute")


def _schedule_op(op: object) -> tuple[str, int] | None:
    """`op` as a (kind, unit) pair of a string and a whole number, or None when it is not one."""
    import numbers

    if isinstance(op, (str, bytes)):
        return None
    try:
        kind, unit = op  # type: ignore[misc]
    except Exception:  # noqa: BLE001 - not a pair
        return None
    if not isinstance(kind, str) or isinstance(unit, bool) or not isinstance(unit, numbers.Integral):
        return None
    return kind, int(unit)


def sync_schedule_plan(source: str, n_units: int) -> list[list[tuple[str, int]]]:
    """What every rank runs in each unit's pre-forward during an EDiT/A-EDiT sync: `plan[l]` is the list of
    ("issue", u) / ("wait", u) operations the reader's `fn(n_units)` lists after ("all_gather", l−1) and before
    ("all_gather", l), in its order (`methods.edit.EDiTMethod.pre_unit`); "compute" operations are ignored (the
    forward computes each unit right after its all-gather).

    RuleError when the schedule cannot run without a hang or a crash: fn raises or answers anything but a list
    of (kind, unit) pairs, a kind outside `SCHEDULE_KINDS`, a unit outside 0..n−1, the all-gathers not exactly
    units 0, 1, …, n−1 in that order, a unit not issued or not waited for exactly once, a wait before its
    issue, or an issue or a wait after the last all-gather (the sync ends in the last unit's pre-forward).
    A unit all-gathered BEFORE its wait is accepted: its wait runs in a later unit's pre-forward, every rank
    does the same, and `finish` only resets the shard in place; the run shows the damage (the shard group
    computed that unit with the parameters from before the outer step)."""
    fn = load_rule(source, "sync schedule rule")
    n = int(n_units)
    try:
        got = fn(n)
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        raise RuleError(f"fn({n}) raised {type(e).__name__}: {e}") from e
    if not isinstance(got, (list, tuple)):
        raise RuleError(f"fn({n}) returned {_shown(got)}, not a list of (kind, unit) operations")
    plan: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    issued: set[int] = set()
    waited: set[int] = set()
    gathered = 0  # the unit the next all-gather must be
    for i, raw in enumerate(got):
        op = _schedule_op(raw)
        if op is None:
            raise RuleError(f"operation {i} ({_shown(raw, 40)}) is not a pair (kind, unit) with a whole unit")
        kind, unit = op
        if kind not in SCHEDULE_KINDS:
            raise RuleError(f"operation {i} has the unknown kind {kind!r}; one of {', '.join(SCHEDULE_KINDS)}")
        if not 0 <= unit < n:
            raise RuleError(f"operation {i} ({kind!r}, {unit}) names a unit outside 0..{n - 1}")
        if kind == "compute":
            continue
        if kind == "all_gather":
            if unit != gathered:
                raise RuleError(f"operation {i} all-gathers unit {unit} where unit {gathered} comes next: the "
                                f"forward all-gathers every unit once, in order 0..{n - 1}")
            gathered += 1
            continue
        if gathered == n:
            raise RuleError(f"operation {i} ({kind!r}, {unit}) comes after the last all-gather: the sync ends in "
                            f"unit {n - 1}'s pre-forward, so every issue and wait must come before "
                            f"('all_gather', {n - 1})")
        if kind == "issue":
            if unit in issued:
                raise RuleError(f"unit {unit} is issued twice (its pseudo-gradient is sent once)")
            issued.add(unit)
        else:
            if unit not in issued:
                raise RuleError(f"unit {unit} is waited for before it is issued (nothing to wait for)")
            if unit in waited:
                raise RuleError(f"unit {unit} is waited for twice")
            waited.add(unit)
        plan[gathered].append(op)
    if gathered != n:
        raise RuleError(f"the schedule all-gathers {gathered} of the {n} units: the forward all-gathers every unit "
                        f"once, in order")
    for what, done in (("issued", issued), ("waited for", waited)):
        missing = sorted(set(range(n)) - done)
        if missing:
            raise RuleError(f"unit {missing[0]} is never {what}: every unit's sync is issued and waited for once "
                            f"in every sync")
    return plan


def sync_schedule_problem(source: str, n_units: int) -> str | None:
    """Why the sync schedule rule cannot run on a model of `n_units` units (None when it can), found by calling
    it once for that count before any process starts (`sync_schedule_plan`)."""
    try:
        sync_schedule_plan(source, n_units)
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{SYNC_SCHEDULE_SIGNATURE}; it fails on {n_units} units: {e}"
    return None


# ------------------------------------------------------------------------------- the fragment schedule
FRAGMENT_SCHEDULE_SIGNATURE = ("fn(step, warmup, interval, fragments) -> the fragment landing at the start of step, "
                               "or None")
FragmentSchedule = Callable[[int, int, int, int], "int | None"]


def fragment_schedule(source: str) -> FragmentSchedule:
    """The fragment schedule rule as every rank calls it (`methods.streaming`, `sim.programs`): `landing(step,
    warmup, interval, fragments)`, the reader's answer checked to be None or a fragment 0..fragments−1 (a whole
    number; True and 1.0 are not fragments), as an int. No torch: the config probes it before any process."""
    import numbers

    fn = load_rule(source, "fragment schedule rule")

    def landing(step: int, warmup: int, interval: int, fragments: int) -> int | None:
        got = fn(int(step), int(warmup), int(interval), int(fragments))
        if got is None:
            return None
        if isinstance(got, bool) or not isinstance(got, numbers.Integral):
            raise RuleError(f"fn({step}, {warmup}, {interval}, {fragments}) returned {_shown(got)}, not None or a "
                            f"fragment (a whole number)")
        if not 0 <= int(got) < fragments:
            raise RuleError(f"fn({step}, {warmup}, {interval}, {fragments}) returned fragment {int(got)}, outside "
                            f"0..{fragments - 1}")
        return int(got)

    return landing


def fragment_schedule_of(source: str | None) -> FragmentSchedule:
    """What a streaming run (and its simulated twin) asks which fragment lands when: the reader's rule when one is
    set (`RunConfig.fragment_schedule_rule`), else the library's `schedule.fragment_landing`."""
    if source is None:
        from edit_lab.protocol import fragment_landing

        return fragment_landing
    return fragment_schedule(source)


def fragment_schedule_horizon(warmup: int, interval: int, delay: int, steps: int | None = None) -> int:
    """The steps a fragment schedule is probed on before launch: 0 … W + τ + 4H, and the run's own steps (+ τ,
    what the last sends ask) when it has a step count, at most 100 000 steps."""
    last = warmup + delay + 4 * interval
    if steps is not None:
        last = max(last, steps + delay)
    return min(last, 100_000)


def fragment_schedule_problem(source: str, warmup: int, interval: int, fragments: int, delay: int,
                              steps: int | None = None) -> str | None:
    """Why the fragment schedule cannot run (None when it can), found by calling it at every step of
    `fragment_schedule_horizon` before any process starts, twice (every rank must take the same decision).

    Refused: it raises or answers anything but None or a fragment 0..P−1; it answers differently the second time
    (the ranks would disagree and hang in different collectives); it lands a fragment at or before step W + τ
    (its pseudo-gradient would leave τ steps earlier, before the anchors exist at W, and never be sent); two
    landings fewer than τ steps apart (the second would leave while the first still travels, and Streaming
    DiLoCo has one fragment in flight); or a fragment that never lands in the probed steps (its units would
    train alone until the closing sync)."""
    where = f"with W = {warmup}, H = {interval}, P = {fragments}, τ = {delay}"
    try:
        rule = fragment_schedule(source)
        last = fragment_schedule_horizon(warmup, interval, delay, steps)
        landed: list[tuple[int, int]] = []
        for step in range(last + 1):
            try:
                got = rule(step, warmup, interval, fragments)
                again = rule(step, warmup, interval, fragments)
            except RuleError:
                raise
            except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
                raise RuleError(f"fn({step}, {warmup}, {interval}, {fragments}) raised {type(e).__name__}: {e}") from e
            if got != again:
                raise RuleError(f"fn({step}, {warmup}, {interval}, {fragments}) answered {got} then {again}: every "
                                f"rank must take the same decision (a pure function of its arguments)")
            if got is None:
                continue
            if step <= warmup + delay:
                raise RuleError(f"it lands fragment {got} at step {step}, at or before W + τ = {warmup + delay}: its "
                                f"pseudo-gradient would leave at step {step - delay}, before the anchors exist (they "
                                f"are created at W = {warmup})")
            if landed and step - landed[-1][0] < delay:
                raise RuleError(f"it lands fragment {landed[-1][1]} at step {landed[-1][0]} and fragment {got} at "
                                f"step {step}, fewer than τ = {delay} steps apart: fragment {got} would leave while "
                                f"fragment {landed[-1][1]} still travels (one fragment is in flight at a time)")
            landed.append((step, got))
        never = sorted(set(range(fragments)) - {f for _, f in landed})
        if never:
            raise RuleError(f"fragment {never[0]} never lands in steps 0..{last}: its units would never sync until "
                            f"the run's closing sync")
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{FRAGMENT_SCHEDULE_SIGNATURE}; it fails {where}: {e}"
    return None
