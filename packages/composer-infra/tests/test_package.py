import composer_infra


def test_version_is_exposed() -> None:
    assert composer_infra.__version__.count(".") == 2
