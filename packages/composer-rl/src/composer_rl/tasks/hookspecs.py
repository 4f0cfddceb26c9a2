"""Hook specifications for task sources (pluggy project ``composer``).

Plugins add tasks by implementing the hooks below with the ``composer`` hookimpl marker,
for example::

    from composer_rewards import hookimpl

    class MyTasks:
        @hookimpl
        def composer_task_sources(self):
            return [DirectoryTaskSource("my-tasks", Path("~/tasks").expanduser())]

The composition root adds this module with ``pm.add_hookspecs(hookspecs)``; a plugin
registered through the ``composer`` entry-point group is found the same way.
"""

from __future__ import annotations

from composer_hooks import hookspec
from composer_rl.tasks.model import TaskSource


@hookspec
def composer_task_sources() -> list[TaskSource]:
    """Return task sources to add to the suite.

    Each source has a ``name`` and ``tasks(split)``, which yields `Task` objects of that
    split (``"train"`` or ``"heldout"``). Return an empty list to add nothing. All
    implementations are called and their lists concatenated; a source whose name clashes
    with another's, or that yields a task id already seen, is an error naming both.
    """
    raise NotImplementedError
