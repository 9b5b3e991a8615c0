"""How often a 95 % percentile-bootstrap interval of a mean covers the true mean with 2, 3 and 5 seeds.

Why ``learngene compare`` uses the paired t interval (:mod:`learngene.bench.stats`): the differences are drawn
normal with mean 0 (the interval should cover 0 in 95 % of the trials); each trial bootstraps 2,000 resamples.
Run: ``python benchmarks/bootstrap_coverage.py`` (about a minute on one core).
"""

import numpy as np


def coverage(n: int, trials: int = 20_000, resamples: int = 2_000, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    covered = 0
    for sample in rng.standard_normal((trials, n)):
        means = sample[rng.integers(0, n, (resamples, n))].mean(axis=1)
        low, high = np.percentile(means, [2.5, 97.5])
        covered += low <= 0.0 <= high
    return covered / trials


if __name__ == "__main__":
    for n in (2, 3, 5):
        print(f"{n} seeds: the 95 % percentile bootstrap interval covers the mean in {coverage(n):.1%} of trials")
