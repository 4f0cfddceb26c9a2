"""The report's claims as studies anyone can rerun: `composer-rl study NAME`.

Each study runs the variants it needs at tiny scale and returns a table, a figure and a
verdict (one of `VERDICT_LABELS`, how strongly); `run_study` writes them as table.md, plot.png and
result.json into a run directory. A study that does not reproduce is reported as it is.
"""

from composer_rl.studies.base import (
    NOT_IMPLEMENTED,
    VERDICT_LABELS,
    Study,
    StudyOptions,
    StudyOutcome,
    Verdict,
    VerdictLabel,
    check_verdict,
    markdown_table,
)
from composer_rl.studies.registry import STUDIES, get_study
from composer_rl.studies.runner import StudyNotImplemented, StudyRun, run_study

__all__ = [
    "NOT_IMPLEMENTED",
    "STUDIES",
    "VERDICT_LABELS",
    "Study",
    "StudyNotImplemented",
    "StudyOptions",
    "StudyOutcome",
    "StudyRun",
    "Verdict",
    "VerdictLabel",
    "check_verdict",
    "get_study",
    "markdown_table",
    "run_study",
]
