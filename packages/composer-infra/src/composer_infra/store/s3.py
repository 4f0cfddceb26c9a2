"""The `s3://bucket/prefix` object store, through boto3, for any S3-compatible endpoint.

Credentials, region and endpoint come from the usual AWS configuration (environment,
``~/.aws/config``, instance roles; ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` for MinIO,
R2, Ceph and friends) unless passed explicitly. Transient errors are retried by botocore
(``standard`` retry mode); large objects go up and down as parallel multipart transfers
(boto3's ``TransferConfig``). S3 makes a completed PUT or multipart upload visible
atomically, which is the guarantee the manifest-last protocol needs.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

from composer_infra.store.errors import ObjectNotFound

MiB = 1024 * 1024


class S3Store:
    """Objects under ``s3://bucket/prefix``."""

    def __init__(
        self,
        url: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        max_attempts: int = 10,
        multipart_threshold: int = 64 * MiB,
        multipart_chunksize: int = 16 * MiB,
        max_concurrency: int = 8,
        addressing_style: str = "auto",
        progress: Callable[[int], None] | None = None,
    ) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"S3Store needs a URL like s3://bucket/prefix, got {url!r}")
        if multipart_chunksize < 5 * MiB:
            raise ValueError(
                f"multipart_chunksize={multipart_chunksize} is below S3's 5 MiB minimum part size"
            )
        self.url = url.rstrip("/")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self._progress = progress
        config = Config(
            retries={"max_attempts": max_attempts, "mode": "standard"},
            s3={"addressing_style": addressing_style},
            max_pool_connections=max(10, 2 * max_concurrency),
        )
        session = boto3.session.Session(region_name=region_name)
        self.client: Any = session.client("s3", endpoint_url=endpoint_url, config=config)
        self.transfer = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=multipart_chunksize,
            max_concurrency=max_concurrency,
            use_threads=True,
        )

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> None:
        self.client.upload_fileobj(
            io.BytesIO(data),
            self.bucket,
            self._key(key),
            Config=self.transfer,
            Callback=self._progress,
        )

    def get(self, key: str) -> bytes:
        buffer = io.BytesIO()
        try:
            self.client.download_fileobj(self.bucket, self._key(key), buffer, Config=self.transfer)
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in {"404", "NoSuchKey", "NotFound"}:
                raise ObjectNotFound(f"{self.url}/{key} does not exist") from None
            raise
        return buffer.getvalue()

    def list(self, prefix: str = "") -> list[str]:
        full = self._key(prefix)
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
            keys.extend(item["Key"][strip:] for item in page.get("Contents", []))
        return sorted(keys)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"
