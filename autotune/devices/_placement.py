"""Which free devices a trial gets: the nearest set of n, by a cost between pairs of devices."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from itertools import combinations

from autotune.devices._topology import Topology, bonded_links, link_rank

PairCost = Callable[[int, int], int]

_MAX_BONDED = 20


def pair_cost(topology: Topology | None, groups: Mapping[int, Hashable]) -> PairCost:
    """The cost between two devices, lower for nearer ones.

    1000 per rank of their link (interconnect 1 .. SYS 6, unknown 7; every pair ranks 0 without a
    topology), plus 100 when they lie in different `groups` (NUMA nodes; devices without a group
    are taken to share one), plus 20 less the bonded NVLinks between them (more links, nearer).
    """

    def cost(a: int, b: int) -> int:
        link = topology.link(a, b) if topology is not None else None
        rank = link_rank(link) if topology is not None else 0
        ga, gb = groups.get(a), groups.get(b)
        apart = ga is not None and gb is not None and ga != gb
        return 1000 * rank + (100 if apart else 0) + _MAX_BONDED - min(bonded_links(link), 20)

    return cost


def nearest_set(free: Sequence[int], n: int, cost: PairCost) -> list[int]:
    """The n devices of `free` nearest together, sorted.

    Nearest: the set whose dearest pair costs least, then whose pairs cost least in total, then
    that spans the fewest ids, then the lowest ids. Each free device seeds a set that grows by the
    device cheapest to add (by the same order); the best of those sets is taken. Greedy, so a
    pool of any size is fast, at the price of exactness on odd topologies.
    """
    if not 1 <= n <= len(free):
        raise ValueError(f"cannot choose {n} of {len(free)} free devices")
    best: tuple[int, int, int, list[int]] | None = None
    for seed in free:
        chosen = _grow(seed, [d for d in free if d != seed], n, cost)
        key = _set_key(chosen, cost)
        if best is None or key < best:
            best = key
    assert best is not None
    return best[3]


def _grow(seed: int, rest: list[int], n: int, cost: PairCost) -> list[int]:
    chosen = [seed]
    # Per candidate: its dearest and total cost to the chosen ones, and its id gap to them.
    worst = {d: cost(d, seed) for d in rest}
    total = dict(worst)
    gap = {d: abs(d - seed) for d in rest}
    while len(chosen) < n:
        pick = min(rest, key=lambda d: (worst[d], total[d], gap[d], d))
        chosen.append(pick)
        rest.remove(pick)
        for d in rest:
            c = cost(d, pick)
            worst[d] = max(worst[d], c)
            total[d] += c
            gap[d] = min(gap[d], abs(d - pick))
    return chosen


def _set_key(ids: list[int], cost: PairCost) -> tuple[int, int, int, list[int]]:
    pairs = [cost(a, b) for a, b in combinations(ids, 2)]
    ordered = sorted(ids)
    return (max(pairs, default=0), sum(pairs), ordered[-1] - ordered[0], ordered)
