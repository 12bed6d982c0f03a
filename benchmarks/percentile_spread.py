"""How much does a percentile over N requests move from one run to the next?

Draws `--runs` independent runs of N latencies from a fixed distribution, takes each run's
percentile as autotune does (linear interpolation, numpy's default method: the same formula as
`autotune.bench._metrics.percentile`), and prints, per percentile and N:

- k: the expected number of samples above the percentile, N * (1 - q/100);
- sd(log): the standard deviation of the log of the run's percentile (0.10: about +-10%);
- bias: the median run's value over the true percentile;
- 2 runs >20% apart: the share of pairs of runs whose values differ by more than 1.2x.

Then the same for the p99 of a trial measured with `--repeats 3`: the median of 3 runs' p99s.

Numpy only, seeded: `python benchmarks/percentile_spread.py [--runs 20000] [--seed 0]`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np

SIZES = (20, 64, 100, 200, 256, 1000, 4000)
PERCENTILES = (50.0, 90.0, 95.0, 99.0)
REPEATS = 3


Draw = Callable[[tuple[int, ...]], np.ndarray]


def distributions(rng: np.random.Generator) -> dict[str, tuple[Draw, Callable[[float], float]]]:
    """name -> (draw(shape), true q-th percentile)."""
    sigma = 0.5
    return {
        "exponential": (
            lambda shape: rng.exponential(1.0, shape),
            lambda q: -math.log(1.0 - q / 100.0),
        ),
        f"lognormal(sigma={sigma})": (
            lambda shape: rng.lognormal(0.0, sigma, shape),
            lambda q: math.exp(sigma * _normal_quantile(q / 100.0)),
        ),
    }


def _normal_quantile(p: float) -> float:
    # By bisection on erf: numpy has no inverse normal CDF and scipy is not needed for this.
    low, high = -10.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{args.runs} runs of N requests each, seed {args.seed}")
    for name, (draw, true) in distributions(rng).items():
        print(f"\n{name}")
        print(f"{'pct':>4} {'N':>5} {'k':>6} {'sd(log)':>8} {'bias':>6} {'2 runs >20% apart':>18}")
        for q in PERCENTILES:
            for n in SIZES:
                values = np.percentile(draw((args.runs, n)), q, axis=1)  # method="linear"
                print(f"p{q:<3.0f} {n:>5} {n * (1 - q / 100):>6.1f} {_row(values, true(q))}")
        print(f"p99, median of {REPEATS} runs (--repeats {REPEATS})")
        for n in (64, 256, 1000):
            values = np.median(np.percentile(draw((args.runs, REPEATS, n)), 99, axis=2), axis=1)
            print(f"p99  {n:>5} {n * 0.01:>6.1f} {_row(values, true(99))}")


def _row(values: np.ndarray, true: float) -> str:
    logs = np.log(values)
    apart = np.abs(logs[0::2] - logs[1::2]) > math.log(1.2)  # independent pairs of runs
    return f"{logs.std():>8.3f} {np.median(values) / true:>6.2f} {apart.mean():>17.0%}"


if __name__ == "__main__":
    main()
