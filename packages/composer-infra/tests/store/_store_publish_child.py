"""Child process for the kill-mid-upload test: publishes versions to S3 until killed.

Prints ``published <v>`` after each complete version and ``uploading <v>`` as soon as the
first multipart bytes of version `--stall-version` have gone out.
"""

from __future__ import annotations

import argparse
import sys

import torch

from composer_infra.store import PublisherConfig, S3Store, WeightPublisher


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--versions", type=int, required=True)
    parser.add_argument("--stall-version", type=int, required=True)
    args = parser.parse_args()
    announced = {"done": False}
    current = {"v": -1}

    def progress(nbytes: int) -> None:
        if current["v"] == args.stall_version and not announced["done"]:
            announced["done"] = True
            print(f"uploading {current['v']}", flush=True)

    store = S3Store(
        args.url,
        endpoint_url=args.endpoint,
        multipart_threshold=5 * 1024 * 1024,
        multipart_chunksize=5 * 1024 * 1024,
        max_concurrency=1,
        progress=progress,
    )
    with WeightPublisher(store, PublisherConfig(snapshot_every=100)) as pub:
        g = torch.Generator().manual_seed(0)
        # Random bits do not compress, so the snapshot is a real multi-part upload (~24 MiB).
        state = {
            "w": torch.randint(-(2**15), 2**15, (12 * 1024 * 1024,), generator=g, dtype=torch.int16)
        }
        for v in range(args.versions):
            current["v"] = v
            if v == args.stall_version:
                # Force a big upload at the version we will be killed in.
                state = {
                    "w": torch.randint(
                        -(2**15), 2**15, state["w"].shape, generator=g, dtype=torch.int16
                    )
                }
            else:
                state = {"w": state["w"].clone()}
                state["w"][v] += 1
            pub.publish(state, v).result()
            print(f"published {v}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
