"""Names the templates draw from, each belonging to one split.

With eight module and eight function names serving every task, a held-out task was a
training task with its parameters reshuffled, and the SFT policy's held-out pass@1 fell
from 0.224 to 0.033 on the same templates given names no task used: much of what looked
like skill was recall. So every name here belongs to one split, by a hash of the name
itself (`name_split`), and a task draws all its names from one split (`named_grid` in
`base.py`): a held-out task uses names that no training task uses, and a policy must copy
names from what it reads instead of recalling them.

The words are short and common (the tiny model's tokenizer is trained on the standard
library's source), none is a Python keyword, builtin or standard-library module name
(`tests/test_tasks_names.py` checks), and the pools do not share words.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from composer_rl.tasks.model import Split

HELDOUT_NAME_EVERY = 5
"""One name in this many (by hash) belongs to the held-out split."""

MODULES: tuple[str, ...] = (
    "mathops", "scores", "billing", "geometry", "stats", "ledger", "metrics", "pricing",
    "inventory", "orders", "payroll", "invoices", "shipping", "catalog", "budget", "grades",
    "weather", "sensors", "traffic", "votes", "recipes", "tickets", "rentals", "fleet",
    "parking", "energy", "harvest", "tariffs", "loans", "savings", "rewards", "bookings",
    "lessons", "patients", "dosage", "freight", "warehouse", "garden", "kitchen", "playlist",
    "survey", "census", "election", "league", "fitness", "calories", "mileage", "taxes",
    "wages", "quotes", "auctions", "coupons", "discounts", "refunds", "deposits", "portfolio",
    "dividends", "ratings", "orchard", "bakery", "clinic", "museum", "cargo", "venues",
)  # fmt: skip

FUNCTIONS: tuple[str, ...] = (
    "combine", "blend", "mix", "fold", "merge", "total", "scale", "compute",
    "tally", "measure", "reckon", "gauge", "estimate", "summarize", "aggregate", "accumulate",
    "weigh", "rank", "grade", "evaluate", "derive", "settle", "apportion", "allocate",
    "distribute", "forecast", "adjust", "normalize", "balance", "reconcile", "collect",
    "gather", "bundle", "assemble", "tabulate", "quantify", "appraise", "assess", "rate",
    "price", "charge", "bill", "credit", "debit", "convert", "project", "smooth", "shift",
    "offset", "stretch", "shrink", "amplify", "dampen", "boost", "trim", "pad", "round_off",
    "clamp_to", "spread", "pool", "stack", "pair_up", "count_up", "add_up",
)  # fmt: skip

HELPERS: tuple[str, ...] = (
    "line_cost", "item_cost", "unit_cost", "row_cost", "entry_cost", "part_cost",
    "seat_cost", "box_cost", "lot_cost", "slot_cost", "trip_cost", "task_cost", "load_cost",
    "pack_cost", "bag_cost", "job_cost", "crate_cost", "shift_cost", "room_cost", "tray_cost",
)  # fmt: skip

PARAMS: tuple[str, ...] = (
    "value", "amount", "count", "size", "quantity", "weight", "length", "width", "height",
    "level", "units", "volume", "depth", "speed", "score", "points", "hours", "minutes",
    "distance", "capacity_in",
)  # fmt: skip

CONSTANTS: tuple[str, ...] = (
    "LIMIT", "RATE", "FACTOR", "WIDTH", "MAX_ITEMS", "TIMEOUT", "THRESHOLD", "CAPACITY",
    "MARGIN", "BATCH_SIZE", "RETRIES", "OFFSET", "SCALE", "PADDING", "QUOTA", "CEILING",
    "FLOOR", "STEP", "WINDOW", "BUDGET", "INTERVAL", "MAX_USERS", "MIN_SCORE", "BONUS",
)  # fmt: skip

POOLS: dict[str, tuple[str, ...]] = {
    "modules": MODULES,
    "functions": FUNCTIONS,
    "helpers": HELPERS,
    "params": PARAMS,
    "constants": CONSTANTS,
}
"""Every pool, by name (the name checks and `tasks list` read them)."""


def name_split(name: str) -> Split:
    """The split a vocabulary name belongs to, from a hash of the name alone (stable on every
    machine and Python version)."""
    digest = hashlib.sha256(f"name:{name}".encode()).digest()
    heldout = int.from_bytes(digest[:8], "big") % HELDOUT_NAME_EVERY == 0
    return Split.HELDOUT if heldout else Split.TRAIN


def names(pool: Sequence[str], split: Split) -> tuple[str, ...]:
    """The names of `pool` that belong to `split`, in the pool's order."""
    return tuple(name for name in pool if name_split(name) == split)


FLAGS: tuple[str, ...] = (
    "ordered", "sort_output", "alphabetical", "in_order", "by_name", "arranged", "tidy",
    "sorted_result", "sort_words", "ranked", "lexical", "abc_order", "ordered_output",
    "sort_first", "orderly", "as_sorted", "want_sorted", "alpha_sort", "sequenced", "neat",
)  # fmt: skip
"""Boolean keyword arguments that switch sorting on (`add_sort_flag`)."""

POOLS["flags"] = FLAGS

CLASSES: tuple[str, ...] = (
    "Item", "Entry", "Product", "Record", "Article", "Parcel", "Holding", "Asset", "Listing",
    "Carton", "Batch", "Shipment", "Consignment", "Package", "Supply", "Commodity", "Ware",
    "Goods", "Lineitem", "Sku",
)  # fmt: skip
"""Class names (`tuples_to_dataclass`'s record type)."""

POOLS["classes"] = CLASSES
