import importlib.util
import sys
import types

import pytest

from composer_parallel import deep_ep_available, expert_dispatch_backend


def test_without_deep_ep_dispatch_falls_back_to_all_to_all() -> None:
    assert importlib.util.find_spec("deep_ep") is None  # not a dependency: never installed here
    assert not deep_ep_available()
    assert expert_dispatch_backend() == "all_to_all"


def test_asking_for_missing_deep_ep_says_how_to_install_it() -> None:
    with pytest.raises(RuntimeError, match="build DeepEP from its source"):
        expert_dispatch_backend(prefer="deep_ep")


def test_an_installed_deep_ep_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("deep_ep")
    fake.__spec__ = importlib.util.spec_from_loader("deep_ep", loader=None)
    monkeypatch.setitem(sys.modules, "deep_ep", fake)
    assert deep_ep_available()
    assert expert_dispatch_backend() == "deep_ep"
    assert expert_dispatch_backend(prefer="all_to_all") == "all_to_all"
