import composer_parallel


def test_version_is_exposed() -> None:
    assert composer_parallel.__version__.count(".") == 2
