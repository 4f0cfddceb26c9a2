"""pass@k, the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models
Trained on Code"): with n samples of which c pass, 1 - C(n-c, k) / C(n, k)."""

from __future__ import annotations

import math


def pass_at_k(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n; got n={n}, c={c}")
    if k < 1 or k > n:
        raise ValueError(f"k must be in [1, n={n}]; got {k}")
    if n - c < k:
        return 1.0
    # The product form avoids huge binomials: prod_{i=n-c+1}^{n} (1 - k / i).
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))
