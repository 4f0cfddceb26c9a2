"""The built-in task templates, one module per category of the report's mix."""

from composer_rl.tasks.templates.base import Template, split_of
from composer_rl.tasks.templates.code_review import AddressReview, ReviewAndFix, ReviewDiff
from composer_rl.tasks.templates.debugging import CrossFileBug, FixOperator, FloatMoney, OffByOne
from composer_rl.tasks.templates.devops import FixCI, FixConfig, PrintsToLogging
from composer_rl.tasks.templates.documentation import AddDocstring, FixDocExamples
from composer_rl.tasks.templates.feature_iteration import AddCliOption, AddOffset, AddSortFlag
from composer_rl.tasks.templates.migration import MoveCallers, TuplesToDataclass
from composer_rl.tasks.templates.new_feature import AddCommand, AddStringFunction, ImplementStub
from composer_rl.tasks.templates.optimisation import (
    BatchQueries,
    IndexLookups,
    MemoizeRecursion,
)
from composer_rl.tasks.templates.refactor import ExtractConstant, RenameField, RenameFunction
from composer_rl.tasks.templates.selection import PAIR_KEY, KeepItems, PickItem
from composer_rl.tasks.templates.testing import WritePackageTests, WriteTests
from composer_rl.tasks.templates.understanding import (
    FindDefinition,
    ReadConstant,
    RemoveDeadCode,
)

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
    # A change across several files and tens of lines for each of the seven older
    # categories and three of the newer ones (issue 31), appended so that every template
    # above keeps its place.
    FloatMoney(),
    AddCliOption(),
    AddCommand(),
    RenameField(),
    RemoveDeadCode(),
    FixDocExamples(),
    WritePackageTests(),
    AddressReview(),
    IndexLookups(),
    PrintsToLogging(),
]

MULTI_FILE_TEMPLATES: tuple[str, ...] = (
    "review_and_fix",
    "batch_queries",
    "fix_ci",
    "tuples_to_dataclass",
    "float_money",
    "add_cli_option",
    "add_command",
    "rename_field",
    "remove_dead_code",
    "fix_doc_examples",
    "write_package_tests",
    "address_review",
    "index_lookups",
    "prints_to_logging",
)
"""Templates whose oracle changes three or more files: one for each category of issue #18
(11 to 34 changed lines), and one for every category but migration whose change is tens of
lines (issue 31; migration's is `tuples_to_dataclass`)."""

__all__ = ["BUILTIN_TEMPLATES", "MULTI_FILE_TEMPLATES", "PAIR_KEY", "Template", "split_of"]
