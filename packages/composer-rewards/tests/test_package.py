import composer_rewards


def test_version_is_exposed() -> None:
    assert composer_rewards.__version__.count(".") == 2
