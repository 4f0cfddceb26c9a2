"""The built-in task templates, one module per category of the report's mix."""

from composer_rl.tasks.templates.base import Template, split_of
from composer_rl.tasks.templates.debugging import CrossFileBug, FixOperator, OffByOne
from composer_rl.tasks.templates.documentation import AddDocstring
from composer_rl.tasks.templates.feature_iteration import AddOffset, AddSortFlag
from composer_rl.tasks.templates.new_feature import AddStringFunction, ImplementStub
from composer_rl.tasks.templates.refactor import ExtractConstant, RenameFunction
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
]

__all__ = ["BUILTIN_TEMPLATES", "Template", "split_of"]
