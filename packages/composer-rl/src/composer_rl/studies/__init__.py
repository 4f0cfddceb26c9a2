"""The report's claims as studies anyone can rerun: `composer-rl study NAME`.

Each study runs the variants it needs at tiny scale and returns a table, a figure and a
verdict (held or not, how strongly); `run_study` writes them as table.md, plot.png and
result.json into a run directory. A study that does not reproduce is reported as it is.
"""

from composer_rl.studies.base import (
    NOT_IMPLEMENTED,
    Study,
    StudyOptions,
    StudyOutcome,
    Verdict,
    markdown_table,
)
from composer_rl.studies.registry import STUDIES, get_study
from composer_rl.studies.runner import StudyNotImplemented, StudyRun, run_study

__all__ = [
    "NOT_IMPLEMENTED",
    "STUDIES",
    "Study",
    "StudyNotImplemented",
    "StudyOptions",
    "StudyOutcome",
    "StudyRun",
    "Verdict",
    "get_study",
    "markdown_table",
    "run_study",
]
