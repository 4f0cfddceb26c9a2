"""Pretraining files whose own identifiers are renamed to invented words (issue 29).

Why: the SFT policy writes a name it knows whole and a new word's later tokens at about
0.58, and where it fails it gives the right next piece a probability near 0 even when the
same pieces stand a few lines up (`furn` → ` sp`, not `ace`). Its pretrained checkpoint
does no better on the same transcripts. In the standard library every identifier is a name
the model can learn by heart, so pretraining never pays for copying one. A file whose
functions, classes, parameters and variables are renamed, the same way throughout, to words
drawn from thousands (`invented.WIDE_WORDS`, which holds no word any task of either split is
named with) can only be predicted past each name's first mention by copying it from
context. That is what the agent must do with a held-out task's names.

Only names the file itself defines are renamed (and `self.x` attributes it assigns), never
keywords, builtins, standard-library module names or dunders, so imported APIs keep their
names. Names inside strings and comments are left as they are.
"""

from __future__ import annotations

import ast
import hashlib
import io
import keyword
import random
import re
import tokenize
from collections.abc import Sequence

from composer_rl.tasks.invented import RESERVED_NAMES, WIDE_WORDS

KEPT = frozenset({"self", "cls", "args", "kwargs"})
"""Conventional names every file shares: renaming them teaches nothing about copying."""


def chosen_for_renaming(name: str, share: float, seed: int) -> bool:
    """Whether document `name` is renamed: by a hash, so the same files on every machine."""
    digest = hashlib.sha256(f"renamed:{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def _renamable(name: str) -> bool:
    return (
        not (name.startswith("__") and name.endswith("__"))
        and len(name.strip("_")) >= 2
        and name not in RESERVED_NAMES
        and name not in KEPT
        and name not in keyword.softkwlist  # `match` bound as a name is still a statement
    )


def defined_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(every name the file binds, those that may also follow a dot: its functions, classes
    and the attributes it assigns on `self` / `cls`)."""
    bound: set[str] = set()
    dotted: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
            dotted.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            dotted.add(node.attr)
    bound |= dotted
    return {n for n in bound if _renamable(n)}, {n for n in dotted if _renamable(n)}


def _parts(name: str) -> list[str]:
    return [p for p in re.split(r"_+|(?<=[a-z0-9])(?=[A-Z])", name.strip("_")) if p]


def invented_identifier(original: str, rng: random.Random, words: Sequence[str]) -> str:
    """One or two words (as many as `original` has parts, at most two) in its style:
    `snake_case`, `UPPER_CASE` or `CamelCase`, with its leading underscores."""
    count = min(2, max(1, len(_parts(original))))
    picked = [rng.choice(words) for _ in range(count)]
    core = original.strip("_")
    if core.isupper():
        body = "_".join(word.upper() for word in picked)
    elif core[:1].isupper():
        body = "".join(word.capitalize() for word in picked)
    else:
        body = "_".join(picked)
    return original[: len(original) - len(original.lstrip("_"))] + body


def renamed_source(text: str, rng: random.Random, words: Sequence[str] = WIDE_WORDS) -> str:
    """`text` with the names it defines renamed consistently; unchanged where it does not
    parse (a file of another Python, or not Python)."""
    try:
        tree = ast.parse(text)
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, ValueError, tokenize.TokenError):
        return text
    bound, dotted = defined_names(tree)
    if not bound:
        return text
    present = {tok.string for tok in tokens if tok.type == tokenize.NAME}
    mapping: dict[str, str] = {}
    for name in sorted(bound):
        new = invented_identifier(name, rng, words)
        while new in present or new in mapping.values() or new in RESERVED_NAMES:
            new = invented_identifier(name, rng, words)
        mapping[name] = new
    lines = text.splitlines(keepends=True)
    edits: dict[int, list[tuple[int, int, str]]] = {}
    previous = None
    for tok in tokens:
        if tok.type == tokenize.NAME and tok.string in mapping:
            after_dot = previous is not None and previous.string == "."
            if not after_dot or tok.string in dotted:
                row, col = tok.start
                edits.setdefault(row - 1, []).append((col, tok.end[1], mapping[tok.string]))
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok
    for row, spans in edits.items():
        line = lines[row]
        for start, end, new in sorted(spans, reverse=True):
            line = line[:start] + new + line[end:]
        lines[row] = line
    return "".join(lines)


def renamed_texts(documents: Sequence[tuple[str, str]], share: float, seed: int) -> dict[int, str]:
    """Index → renamed text for the `share` of (name, text) documents `chosen_for_renaming`
    whose text changes; each file's words drawn from its own seeded generator."""
    out: dict[int, str] = {}
    for index, (name, text) in enumerate(documents):
        if not chosen_for_renaming(name, share, seed):
            continue
        renamed = renamed_source(text, random.Random(f"{seed}:{name}"))
        if renamed != text:
            out[index] = renamed
    return out
