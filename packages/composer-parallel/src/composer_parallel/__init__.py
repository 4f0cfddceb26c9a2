"""Device meshes, context and expert parallelism (folded from DP x CP) and sequence packing for composer-model."""

__version__ = "0.1.0"

__all__ = ["__version__"]
