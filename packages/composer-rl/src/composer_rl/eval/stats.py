"""Standard errors for evaluation scores.

Every score the eval table prints is a mean over tasks of a per-task value (pass@k of the
task's samples, a side eval's score, a reward averaged over the task's episodes). Its
standard error is the sample standard deviation of the per-task values over the square root
of the number of tasks: the normal approximation over tasks, which for a 0/1 value with one
sample per task is the binomial standard error sqrt(p (1 - p) / (n - 1)). Tasks, not
episodes, are the unit: samples of one task are not independent draws of the suite.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def mean_se(values: Iterable[float]) -> tuple[float, float]:
    """(mean, standard error of the mean) of per-task values; the SE is NaN below 2 tasks."""
    data = list(values)
    if not data:
        return 0.0, math.nan
    mean = statistics.fmean(data)
    if len(data) < 2:
        return mean, math.nan
    return mean, statistics.stdev(data) / math.sqrt(len(data))


def format_se(mean: float, se: float, digits: int = 3, sign: bool = False) -> str:
    """'0.250 ± 0.061' (or just the mean when the SE is not defined); `sign` writes the
    mean's sign always ('+0.022 ± 0.024'), for differences."""
    head = f"{mean:+.{digits}f}" if sign else f"{mean:.{digits}f}"
    return head if math.isnan(se) else f"{head} ± {se:.{digits}f}"
