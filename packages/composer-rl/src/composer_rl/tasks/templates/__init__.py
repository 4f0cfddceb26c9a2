"""The built-in task templates, one module per category of the report's mix."""

from composer_rl.tasks.templates.base import Template, split_of
from composer_rl.tasks.templates.code_review import ReviewAndFix, ReviewDiff
from composer_rl.tasks.templates.debugging import CrossFileBug, FixOperator, OffByOne
from composer_rl.tasks.templates.devops import FixCI, FixConfig
from composer_rl.tasks.templates.documentation import AddDocstring
from composer_rl.tasks.templates.feature_iteration import AddOffset, AddSortFlag
from composer_rl.tasks.templates.migration import MoveCallers, TuplesToDataclass
from composer_rl.tasks.templates.new_feature import AddStringFunction, ImplementStub
from composer_rl.tasks.templates.optimisation import BatchQueries, MemoizeRecursion
from composer_rl.tasks.templates.refactor import ExtractConstant, RenameFunction
from composer_rl.tasks.templates.selection import PAIR_KEY, KeepItems, PickItem
from composer_rl.tasks.templates.testing import WriteTests
from composer_rl.tasks.templates.understanding import FindDefinition, ReadConstant

BUILTIN_TEMPLATES: list[Template] = [
    FixOperator(),
    OffByOne(),
    CrossFileBug(),
    AddOffset(),
    AddSortFlag(),
    ImplementStub(),
    AddStringFunction(),
    ExtractConstant(),
    RenameFunction(),
    ReadConstant(),
    FindDefinition(),
    AddDocstring(),
    WriteTests(),
    # The report's four remaining categories (issue #18), appended so that the first 13
    # templates keep their order, ids and splits.
    ReviewDiff(),
    ReviewAndFix(),
    MemoizeRecursion(),
    BatchQueries(),
    FixConfig(),
    FixCI(),
    MoveCallers(),
    TuplesToDataclass(),
    # Minimal pairs (issue #29): appended so that every template above keeps its place.
    PickItem(),
    KeepItems(),
]

MULTI_FILE_TEMPLATES: tuple[str, ...] = (
    "review_and_fix",
    "batch_queries",
    "fix_ci",
    "tuples_to_dataclass",
)
"""One template per new category whose change spans several files and tens of lines."""

__all__ = ["BUILTIN_TEMPLATES", "MULTI_FILE_TEMPLATES", "PAIR_KEY", "Template", "split_of"]
