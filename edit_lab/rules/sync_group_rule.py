"""The sync group (`RunConfig.rules.sync_group`, notebook 03).

Part of `edit_lab.rules` (a reader's own rule, run by every rank), which re-exports every name here and says
how the rules work."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from edit_lab.rules.source import RuleError, load_rule


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
