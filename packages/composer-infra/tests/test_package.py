"""The version the package reports is the one its distribution was installed with."""

from importlib.metadata import version

import composer_infra


def test_version_matches_the_installed_distribution() -> None:
    # pyproject.toml is the source of truth; a stale `__version__` fails here.
    assert composer_infra.__version__ == version("composer-infra")


def test_lazy_exports_resolve_and_stay_lazy() -> None:
    import subprocess
    import sys

    import pytest

    import composer_infra.checkpoint
    import composer_infra.store

    for package in (composer_infra, composer_infra.checkpoint, composer_infra.store):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
        with pytest.raises(AttributeError, match=f"{package.__name__}' has no attribute 'nope'"):
            package.nope  # noqa: B018
    # Importing the package (sandboxes, environments) must not pull in torch or ray.
    probe = "import sys, composer_infra; print('torch' in sys.modules, 'ray' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
