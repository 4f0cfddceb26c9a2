"""The weight store against a real S3 API server (moto's standalone server on loopback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import _store_fixtures
import boto3
import pytest
import torch
from _store_helpers import assert_bit_identical, make_state, train_step

from composer_infra.store import (
    ObjectNotFound,
    PublisherConfig,
    S3Store,
    WeightPublisher,
    WeightSubscriber,
    open_store,
)
from composer_infra.store.manifest import blob_key, manifest_key

# The S3 fixtures (see _store_fixtures for why they do not live in a conftest.py).
aws_env = _store_fixtures.aws_env
s3_endpoint = _store_fixtures.s3_endpoint
s3_bucket = _store_fixtures.s3_bucket

HERE = Path(__file__).parent
MiB = 1024 * 1024


def s3_store(bucket: str, endpoint: str, **kw: object) -> S3Store:
    return S3Store(
        f"s3://{bucket}/run-1/weights",
        endpoint_url=endpoint,
        multipart_threshold=5 * MiB,
        multipart_chunksize=5 * MiB,
        **kw,  # type: ignore[arg-type]
    )


def test_object_store_basics(s3_bucket: str, s3_endpoint: str) -> None:
    store = s3_store(s3_bucket, s3_endpoint)
    store.put("a/b", b"hello")
    big = os.urandom(11 * MiB)  # above the threshold: a three-part multipart upload
    store.put("a/big", big)
    assert store.get("a/b") == b"hello"
    assert store.get("a/big") == big
    assert store.list("a/") == ["a/b", "a/big"]
    store.delete("a/b")
    with pytest.raises(ObjectNotFound):
        store.get("a/b")
    raw = boto3.client("s3", endpoint_url=s3_endpoint)
    keys = [o["Key"] for o in raw.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert keys == ["run-1/weights/a/big"]


def test_endpoint_and_region_come_from_the_usual_aws_configuration(
    s3_bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    store = open_store(f"s3://{s3_bucket}/via-env")
    store.put("k", b"v")
    assert store.get("k") == b"v"


def test_publish_and_subscribe_across_versions(s3_bucket: str, s3_endpoint: str) -> None:
    store = s3_store(s3_bucket, s3_endpoint)
    states = [make_state(big=3 * MiB)]  # a 6 MiB bf16 tensor: multipart snapshot
    follower = WeightSubscriber(s3_store(s3_bucket, s3_endpoint), readers=2)
    with WeightPublisher(store, PublisherConfig(snapshot_every=3)) as pub:
        for v in range(7):
            if v:
                states.append(train_step(states[-1], v))
            pub.publish(states[-1], v).result()
            if v % 2 == 0:  # the follower sometimes lags by a version
                assert follower.sync() == v
                assert_bit_identical(follower.tensors, states[v])
    late = WeightSubscriber(s3_store(s3_bucket, s3_endpoint))
    assert late.sync() == 6
    assert_bit_identical(late.tensors, states[6])
    assert follower.rejected == [] and late.rejected == []


def test_corrupt_object_and_deleted_delta(s3_bucket: str, s3_endpoint: str) -> None:
    store = s3_store(s3_bucket, s3_endpoint)
    states = [make_state()]
    for v in range(1, 6):
        states.append(train_step(states[-1], v))
    with WeightPublisher(store, PublisherConfig(snapshot_every=4)) as pub:
        for v in range(4):
            pub.publish(states[v], v)
        pub.flush()
        raw = boto3.client("s3", endpoint_url=s3_endpoint)
        key = f"run-1/weights/{blob_key(2, 0, 1)}"
        data = bytearray(raw.get_object(Bucket=s3_bucket, Key=key)["Body"].read())
        data[-3] ^= 0x55
        raw.put_object(Bucket=s3_bucket, Key=key, Body=bytes(data))
        sub = WeightSubscriber(s3_store(s3_bucket, s3_endpoint))
        assert sub.sync() == 1  # stopped before the corrupt delta 2
        assert sub.rejected[0][0] == 2
        assert_bit_identical(sub.tensors, states[1])
        # Publish snapshot 4 and delta 5, then delete delta 5's data object.
        pub.publish(states[4], 4)
        pub.publish(states[5], 5)
        pub.flush()
        raw.delete_object(Bucket=s3_bucket, Key=f"run-1/weights/{blob_key(5, 0, 1)}")
    assert sub.sync() == 4  # fell back to the full snapshot, refused the deleted delta
    assert_bit_identical(sub.tensors, states[4])
    assert sub.rejected[-1][0] == 5 and "does not exist" in sub.rejected[-1][1]


@pytest.mark.slow  # about 7-11 s
def test_publisher_killed_mid_upload(s3_bucket: str, s3_endpoint: str) -> None:
    url = f"s3://{s3_bucket}/killed"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "_store_publish_child.py"),
            "--url",
            url,
            "--endpoint",
            s3_endpoint,
            "--versions",
            "5",
            "--stall-version",
            "3",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    seen = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            seen.append(line.strip())
            if line.startswith("uploading 3"):
                child.send_signal(signal.SIGKILL)
                break
    finally:
        child.kill()
        child.wait(timeout=60)
    assert seen[:3] == ["published 0", "published 1", "published 2"], seen
    assert child.returncode == -signal.SIGKILL
    store = S3Store(url, endpoint_url=s3_endpoint)
    keys = store.list("")
    assert manifest_key(3, 0, 1) not in keys  # the half-done version is invisible
    sub = WeightSubscriber(store)
    assert sub.sync() == 2
    g = torch.Generator().manual_seed(0)
    expected = torch.randint(-(2**15), 2**15, (12 * MiB,), generator=g, dtype=torch.int16)
    expected[0] += 1
    expected[1] += 1
    expected[2] += 1
    assert torch.equal(sub.tensors["w"], expected)
    # A restarted publisher (no base in memory) starts again with a full snapshot.
    restarted = torch.zeros(12 * MiB, dtype=torch.int16)
    with WeightPublisher(store, PublisherConfig(snapshot_every=100)) as pub:
        assert pub.publish({"w": restarted}, 3).result().kind == "snapshot"
    assert sub.sync() == 3
    assert torch.equal(sub.tensors["w"], restarted)


class FlakyS3Proxy:
    """A loopback HTTP proxy in front of the S3 server that answers the first `failures`
    requests with 503 SlowDown, as a throttled S3 does, then forwards everything."""

    def __init__(self, upstream: str, failures: int) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlparse

        target = urlparse(upstream)
        state = {"left": failures, "seen": 0}
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    state["seen"] += 1
                    fail = state["left"] > 0
                    state["left"] -= int(fail)
                if fail:
                    payload = b"<Error><Code>SlowDown</Code><Message>busy</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                reply = conn.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in {"transfer-encoding", "connection", "content-length"}:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        self.state = state
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow  # retries with back-off (about 11 s)
def test_throttled_requests_are_retried(s3_bucket: str, s3_endpoint: str) -> None:
    proxy = FlakyS3Proxy(s3_endpoint, failures=3)
    try:
        store = S3Store(f"s3://{s3_bucket}/flaky", endpoint_url=proxy.url, max_attempts=5)
        state = make_state()
        with WeightPublisher(store) as pub:
            pub.publish(state, 0).result()
        assert proxy.state["left"] == 0 and proxy.state["seen"] > 3  # failed, then retried
        sub = WeightSubscriber(S3Store(f"s3://{s3_bucket}/flaky", endpoint_url=s3_endpoint))
        assert sub.sync() == 0
        assert_bit_identical(sub.tensors, state)
    finally:
        proxy.close()
