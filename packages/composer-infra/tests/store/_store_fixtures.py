"""Fixtures for the weight-store tests: a real S3 API server (moto) on loopback.

Imported by the test modules that use them rather than living in a conftest.py: other
test folders of this package import helpers with `from conftest import ...`, which
resolves to whichever conftest pytest loaded last.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import boto3
import pytest
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
