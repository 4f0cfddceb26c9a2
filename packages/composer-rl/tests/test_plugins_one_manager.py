"""One plugin manager a job serves every plugin kind: rewards, monitors, sandbox backends,
weight stores and task sources (issue 32, item 3).

Two checks that fail when a kind is looked up anywhere but in the job's manager:

- a scan of the workspace's source: only the two builders make a ``PluginManager`` or load
  entry points, only composer-infra's standalone fallbacks reach its standalone manager,
  and every call in composer-rl that looks a plugin kind up names the manager (or the view
  of it) it looks in;
- a job whose lookups run with composer-infra's standalone manager made unusable and every
  build counted: a third-party package's task source, sandbox backend and reward all come
  from the one manager, built once.

`test_rl_thirdparty_plugins.py` (slow) does the second with a real ``composer-rl rl``.
"""

from __future__ import annotations

import ast
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from thirdparty_support import (
    BACKEND,
    ENTRY_POINT,
    HELDOUT_IDS,
    REWARD,
    TRAIN_IDS,
    Watch,
    thirdparty,  # noqa: F401  (a fixture)
    watch_job,
)

from composer_infra.sandbox import BackendRegistry, Sandbox
from composer_infra.sandbox.backends.bwrap import BwrapBackend
from composer_infra.store import FileStore
from composer_rewards import Episode
from composer_rl.agent.sandboxes import sandbox_task
from composer_rl.plugins import JobPlugins, PluginSession, build_plugin_manager
from composer_rl.tasks import Split, collect_tasks

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ROOT / "packages"

# --- the scan ----------------------------------------------------------------------------

BUILDERS = {
    "composer-rl/src/composer_rl/plugins/manager.py",  # a job's manager
    "composer-infra/src/composer_infra/plugins.py",  # composer-infra's own, used alone
}
"""The only files that may make a pluggy ``PluginManager`` or load entry points."""

ENTRY_POINT_READERS = BUILDERS | {"composer-rewards/src/composer_rewards/loading.py"}
"""`iter_entry_points` lives in composer-rewards; only the builders call it."""

STANDALONE_FALLBACKS = {
    ("composer-infra/src/composer_infra/sandbox/registry.py", "default_registry"),
    ("composer-infra/src/composer_infra/store/registry.py", "open_store"),
    ("composer-infra/src/composer_infra/sandbox/sandbox.py", "_resolve_backend"),
    ("composer-infra/src/composer_infra/environment/service.py", "__init__"),
}
"""Where composer-infra, given no manager, falls back to its standalone one."""

JOB_MANAGER_CALLERS = {
    "composer-rl/src/composer_rl/plugins/manager.py",
    "composer-rl/src/composer_rl/plugins/job.py",
}
"""The only composer-rl files that may call `build_plugin_manager` / `new_plugin_manager`:
every other place gets the job's manager from its `JobPlugins`."""


@dataclass(frozen=True)
class Needs:
    """A call that looks a plugin kind up must name where: keyword `keyword`, or an argument
    at `position` (None: keyword only)."""

    keyword: str
    position: int | None


LOOKUPS = {
    "open_store": Needs("plugin_manager", None),
    "collect_tasks": Needs("pm", 2),  # pm=None says "no plugin sources" out loud
    "Sandbox.create": Needs("registry", None),
    "Sandbox.restore": Needs("registry", None),
    "EnvironmentService": Needs("registry", None),
    "BackendRegistry": Needs("pm", 0),
    "EpisodeRunner": Needs("backends", 3),
    "InterruptingRunner": Needs("backends", 3),
    "LocalSandboxes": Needs("registry", 0),
    "PluginSession": Needs("plugins", None),
    "TrainingService": Needs("plugins", None),
    "InferenceService": Needs("plugins", None),
    "EvaluationService": Needs("plugins", None),
    "JobEnvironmentService": Needs("plugins", None),
}
"""composer-rl's calls that must say which manager (or view of it) they look plugins up in.
A service spawned as a Ray actor (``rt.spawn(Service, ...)``) is checked as a call."""


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return ""


def _functions(tree: ast.AST) -> dict[ast.AST, str]:
    """Each call node -> the name of the innermost function around it ("" at module level)."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = (
                child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else None
            )
            if isinstance(child, ast.Call):
                owner[child] = function
            visit(child, inner or function)

    visit(tree, "")
    return owner


def violations(source: str, where: str) -> list[str]:
    """Every place in `source` (the file `where`, relative to packages/) that looks a plugin
    kind up outside the manager it was given."""
    found: list[str] = []
    tree = ast.parse(source)
    in_rl = where.startswith("composer-rl/")
    for call, function in _functions(tree).items():
        assert isinstance(call, ast.Call)
        name = _name(call.func)
        last = name.rsplit(".", 1)[-1]
        at = f"{where}:{call.lineno}"
        if last == "PluginManager" and where not in BUILDERS:
            found.append(f"{at}: makes a PluginManager (only the builders may)")
        if last == "load_setuptools_entrypoints" and where not in BUILDERS:
            found.append(f"{at}: loads entry points (only the builders may)")
        if last in ("iter_entry_points", "entry_points") and where not in ENTRY_POINT_READERS:
            found.append(f"{at}: reads entry points (only the builders may)")
        if last in ("standalone_manager", "default_registry") and (
            in_rl or (where, function) not in STANDALONE_FALLBACKS
        ):
            found.append(f"{at}: {last}() outside a job's manager")
        if last == "new_infra_manager" and in_rl:
            found.append(f"{at}: builds composer-infra's own manager inside a job")
        if not in_rl:
            continue
        builds = last in ("build_plugin_manager", "new_plugin_manager", "make_plugin_manager")
        if builds and where not in JOB_MANAGER_CALLERS:
            found.append(f"{at}: {last}() builds a second manager; use the job's JobPlugins")
        args, keywords = list(call.args), {k.arg for k in call.keywords}
        if last == "spawn" and args:  # rt.spawn(Service, *args, **kwargs): a constructor call
            name, args = _name(args[0]), args[1:]
        for lookup, needs in LOOKUPS.items():
            # A function by its bare name (`JobPlugins.open_store` is the job's view, not
            # this); a class or classmethod also through a module (`sandbox.Sandbox.create`).
            qualified = lookup[0].isupper() and name.endswith("." + lookup)
            if name != lookup and not qualified:
                continue
            positional = needs.position is not None and len(args) > needs.position
            if needs.keyword not in keywords and not positional:
                found.append(f"{at}: {lookup}(...) without {needs.keyword}= (the job's)")
    return found


def _sources() -> Iterator[tuple[str, str]]:
    for path in sorted(PACKAGES.glob("*/src/**/*.py")):
        yield path.read_text(), path.relative_to(PACKAGES).as_posix()


def test_no_plugin_kind_is_looked_up_outside_the_managers_passed_down() -> None:
    scanned = list(_sources())
    assert any(w == "composer-rl/src/composer_rl/rl/run.py" for _, w in scanned)
    found = [v for source, where in scanned for v in violations(source, where)]
    assert found == []


def test_the_scan_catches_each_way_of_looking_outside() -> None:
    bad = """
import pluggy
def f(task, url, engine, tokenizer, config):
    pluggy.PluginManager("composer").load_setuptools_entrypoints("composer")
    open_store(url)
    collect_tasks(Split.TRAIN)
    Sandbox.create(task, "bwrap")
    default_registry().get("bwrap")
    EpisodeRunner(engine, tokenizer, config)
    build_plugin_manager({})
    PluginSession(config, "run", command="rl")
    rt.spawn(InferenceService, "model", url, threads=1)
"""
    found = violations(bad, "composer-rl/src/composer_rl/somewhere.py")
    assert len(found) == 10, found
    good = """
def f(task, url, engine, tokenizer, config, plugins):
    open_store(url, plugin_manager=plugins.pm)
    collect_tasks(Split.TRAIN, None, plugins.pm)
    Sandbox.create(task, "bwrap", registry=plugins.backends)
    EpisodeRunner(engine, tokenizer, config, plugins.backends)
    rt.spawn(InferenceService, "model", url, plugins=plugins)
"""
    assert violations(good, "composer-rl/src/composer_rl/somewhere.py") == []


# --- the behaviour -------------------------------------------------------------------------


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Watch:
    return watch_job(monkeypatch)


@pytest.mark.usefixtures("thirdparty")
def test_the_job_manager_serves_every_kind_of_a_third_party_package(
    watch: Watch, tmp_path: Path
) -> None:
    if BwrapBackend().unavailable_reason():
        pytest.skip(f"bwrap cannot run here: {BwrapBackend().unavailable_reason()}")
    log = tmp_path / "sandboxes.log"
    job = JobPlugins({"plugins": {"block": ["style"]}, "thirdparty": {"log": str(log)}})
    assert job.pm.has_plugin(ENTRY_POINT)  # found through its entry point

    # task sources: the built-in templates' and the package's
    heldout = [t.id for t in collect_tasks(Split.HELDOUT, pm=job.pm)]
    assert set(HELDOUT_IDS) <= set(heldout) and len(heldout) > len(HELDOUT_IDS)
    assert [t.id for t in collect_tasks(Split.TRAIN, [], pm=job.pm)] == list(TRAIN_IDS)
    # sandbox backends: the package's, next to the built-ins
    assert {BACKEND, "bwrap"} <= set(job.backends.backends())
    task = collect_tasks(Split.TRAIN, [], pm=job.pm)[0]
    with Sandbox.create(
        sandbox_task(task), BACKEND, registry=job.backends, work_dir=tmp_path
    ) as sandbox:
        assert sandbox.run("cat calc.py").ok
    assert log.read_text().count("start ") == 1
    # weight stores: the built-ins are on the job's manager too
    assert isinstance(job.open_store((tmp_path / "weights").as_uri()), FileStore)
    # rewards and monitors: the session scores with the same manager
    session = PluginSession(job.config, tmp_path / "run", command="test", plugins=job)
    assert session.pm is job.pm
    assert f"reward/{REWARD}" in session.score(Episode(task="t")).metrics()

    assert len(watch.builds) == 1  # built once, for every kind
    assert watch.standalone_uses == []


def test_job_plugins_travel_as_their_configuration(watch: Watch) -> None:
    job = JobPlugins({"plugins": {"entry_points": False}})
    assert job.pm is job.pm and len(watch.builds) == 1
    copy = pickle.loads(pickle.dumps(job))  # what a Ray actor receives
    assert copy.config == job.config and len(watch.builds) == 1  # nothing built yet
    assert copy.backends.pm is copy.pm is not job.pm  # built once, in "the actor"
    assert len(watch.builds) == 2 and watch.standalone_uses == []


def test_a_job_manager_can_be_viewed_more_than_once(tmp_path: Path) -> None:
    """The manager already has the sandbox hookspec: a registry over it used to add it again
    and fail, and ``open_store`` found no built-in store on it."""
    pm = build_plugin_manager({"plugins": {"entry_points": False}})
    assert BackendRegistry(pm).get().name == BackendRegistry(pm).get().name == "bwrap"
    job = JobPlugins(pm=pm)
    assert job.pm is pm and isinstance(job.open_store(str(tmp_path)), FileStore)
