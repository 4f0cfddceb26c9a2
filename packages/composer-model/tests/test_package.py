import composer_model


def test_version_is_exposed() -> None:
    assert composer_model.__version__.count(".") == 2
