import composer_rl


def test_version_is_exposed() -> None:
    assert composer_rl.__version__.count(".") == 2
