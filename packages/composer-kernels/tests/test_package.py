import composer_kernels


def test_version_is_exposed() -> None:
    assert composer_kernels.__version__.count(".") == 2
