"""Fixtures for the weight-store tests: a real S3 API server (moto) on loopback."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import boto3
import pytest
import torch
from moto.server import ThreadedMotoServer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's standalone S3 server on a free 127.0.0.1 port, for the whole session."""
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Fake credentials, never the developer's real ones."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def s3_bucket(s3_endpoint: str, aws_env: None) -> str:
    """A fresh bucket on the loopback server; returns its name."""
    name = f"weights-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    return name


def make_state(seed: int = 0, big: int = 0) -> dict[str, torch.Tensor]:
    """A small model-shaped state dict with mixed dtypes (bf16 weights, fp32 norms, int buffer)."""
    g = torch.Generator().manual_seed(seed)
    state = {
        "embed.weight": (torch.randn(64, 32, generator=g) * 0.02).to(torch.bfloat16),
        "layers.0.attn.weight": (torch.randn(32, 32, generator=g) * 0.02).to(torch.bfloat16),
        "layers.0.mlp.weight": (torch.randn(128, 32, generator=g) * 0.02).to(torch.bfloat16),
        "layers.0.norm.weight": torch.ones(32),
        "step_counter": torch.tensor([7], dtype=torch.int64),
        "scalar": torch.tensor(3.5, dtype=torch.float16),
    }
    if big:
        state["big.weight"] = torch.randn(big, generator=g).to(torch.bfloat16)
    return state


def train_step(
    state: dict[str, torch.Tensor], seed: int, frac: float = 0.05
) -> dict[str, torch.Tensor]:
    """A new version where a fraction of each floating tensor's elements moved."""
    g = torch.Generator().manual_seed(1000 + seed)
    out = {}
    for name, t in state.items():
        if t.is_floating_point() and t.dim() > 0:
            mask = torch.rand(t.shape, generator=g) < frac
            step = torch.randn(t.shape, generator=g).to(t.dtype) * 1e-2
            out[name] = torch.where(mask, t + step, t)
        else:
            out[name] = t.clone()
    return out


def assert_bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        x, y = a[name], b[name]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)), name
