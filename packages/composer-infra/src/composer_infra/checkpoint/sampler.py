"""A single-epoch prompt sampler whose whole state is one integer (plus its identity).

The Composer report trains each prompt once (single epoch). The order is a seeded
permutation, so the sampler is restored from ``(num_items, seed, position)`` exactly,
and a resumed run draws the same prompts the killed one would have drawn next.
"""

from __future__ import annotations

import random
from typing import Any


class SingleEpochSampler:
    """Hands out item indices ``0..num_items-1`` once each, in a seeded random order."""

    def __init__(self, num_items: int, seed: int = 0) -> None:
        if num_items < 0:
            raise ValueError(f"num_items must be >= 0, got {num_items}")
        self.num_items = num_items
        self.seed = seed
        self.order = list(range(num_items))
        random.Random(seed).shuffle(self.order)
        self.position = 0

    @property
    def exhausted(self) -> bool:
        return self.position >= self.num_items

    @property
    def remaining(self) -> int:
        return self.num_items - self.position

    def peek(self, n: int) -> list[int]:
        """The next `n` items (fewer at the end of the epoch) without taking them."""
        return self.order[self.position : self.position + n]

    def take(self, n: int) -> list[int]:
        items = self.peek(n)
        self.position += len(items)
        return items

    def state_dict(self) -> dict[str, Any]:
        return {"num_items": self.num_items, "seed": self.seed, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["num_items"] != self.num_items or state["seed"] != self.seed:
            raise ValueError(
                f"checkpoint was written for {state['num_items']} prompts with seed "
                f"{state['seed']}, this run has {self.num_items} prompts and seed {self.seed}; "
                "resume with the same prompt set and seed, or start a new run directory"
            )
        if not 0 <= state["position"] <= self.num_items:
            raise ValueError(f"sampler position {state['position']} out of range")
        self.position = int(state["position"])
