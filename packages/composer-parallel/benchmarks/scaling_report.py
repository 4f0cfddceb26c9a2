"""The README's scaling table: the kimi-k2 preset under the Composer report's layouts.

uv run python packages/composer-parallel/benchmarks/scaling_report.py
"""

from __future__ import annotations

from composer_model import preset
from composer_parallel.mesh import ParallelDims
from composer_parallel.scaling import estimate, markdown


def main() -> None:
    config = preset("kimi-k2")
    rows = [
        (
            "EP=8, CP=2 (1024 GPUs, 64k rows)",
            estimate(config, ParallelDims(dp=512, cp=2, ep=8), 65536),
        ),
        (
            "EP=8, CP=8 (2048 GPUs, 256k rows)",
            estimate(config, ParallelDims(dp=256, cp=8, ep=8), 262144),
        ),
    ]
    print(markdown(rows))


if __name__ == "__main__":
    main()
