"""The version the package reports is the one its distribution was installed with."""

from importlib.metadata import version

import composer_model


def test_version_matches_the_installed_distribution() -> None:
    # pyproject.toml is the source of truth; a stale `__version__` fails here.
    assert composer_model.__version__ == version("composer-model")
