"""Training tasks re-rendered with invented names: demonstrations only copying gets right.

The SFT policy of 2026-12-03 guessed the first token of a name it had just read right at
0.40 (0.95 elsewhere, `benchmarks/name_copy.py`): with every training name seen in dozens
of demonstrations, recalling a name that often goes with the words around it is cheaper
to learn than copying it, and a held-out task, whose names no training task uses, then
fails at its first path. A training task's template rendered again with names made up for
it (syllables, or common words: never a name of the task vocabulary of either split) gives
a demonstration in which recall cannot help: the name was never seen as a name before this
context. Held-out names are words, so words are the kind that measures what held-out will
(docs/rl/2026-12-04-word-names.md). Everything else
(the template, its other parameters, the oracle, the hidden tests) is the training task's,
so no held-out task, name or parameter is touched.
"""

from __future__ import annotations

import builtins
import hashlib
import keyword
import random
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, Literal

from composer_rl.tasks.model import Split, Task
from composer_rl.tasks.templates import BUILTIN_TEMPLATES, Template
from composer_rl.tasks.templates.base import name_values
from composer_rl.tasks.templates.vocab import CLASSES, FLAGS, POOLS, name_split

SYLLABLES = (
    "ba", "ce", "di", "fo", "gu", "ha", "je", "ki", "lo", "mu", "na", "pe", "qui", "ro",
    "su", "ta", "vi", "wo", "xa", "yu", "zo", "bri", "cla", "dro", "fle", "gra", "plo",
    "sna", "tri", "vel", "mor", "tan", "lis", "ker", "pon", "dus",
)  # fmt: skip

WORDS = (
    "anchor", "apron", "archive", "arena", "armor", "atlas", "attic", "autumn", "avenue",
    "badge", "bakehouse", "ballot", "banner", "barn", "barrel", "basket", "beacon",
    "beaker", "bench", "berry", "bicycle", "blanket", "blossom", "boiler", "bonnet",
    "border", "bottle", "boulder", "bracket", "branch", "brick", "bridge", "brook",
    "bucket", "buffet", "bunker", "butter", "cabin", "cabinet", "cable", "cactus", "camera",
    "campus", "canal", "candle", "canopy", "canvas", "canyon", "carpet", "carriage",
    "castle", "cellar", "chapel", "charter", "chimney", "circus", "cistern", "citadel",
    "cliff", "closet", "cobble", "compass", "concert", "cottage", "cotton", "county",
    "courier", "cradle", "crater", "crayon", "creek", "cricket", "crown", "cushion",
    "dairy", "desert", "diner", "dock", "dolphin", "dome", "donkey", "drawer", "dune",
    "eagle", "easel", "elbow", "engine", "estate", "fabric", "falcon", "farmhouse",
    "feather", "fence", "ferry", "festival", "fiddle", "finch", "fountain", "fox",
    "furnace", "gallery", "garage", "garnet", "gazette", "glacier", "goblet", "granary",
    "granite", "gravel", "greenhouse", "grocery", "guild", "gutter", "hamlet", "harbor",
    "harness", "hatchet", "hazel", "hedge", "helmet", "heron", "highway", "hive", "hollow",
    "hotel", "hound", "island", "ivory", "jacket", "jetty", "journal", "jungle", "kennel",
    "kettle", "kiosk", "ladder", "lagoon", "lantern", "laundry", "lawn", "leather", "lemon",
    "lighthouse", "linen", "locker", "lodge", "lumber", "magnet", "mansion", "maple",
    "marble", "market", "marsh", "meadow", "mill", "mirror", "monastery", "mosaic", "motel",
    "mountain", "mural", "mustard", "napkin", "needle", "nursery", "oasis", "office",
    "olive", "opera", "orbit", "outpost", "oven", "paddock", "palace", "pantry", "parlor",
    "pasture", "pavilion", "pebble", "pepper", "pharmacy", "piano", "pigeon", "pillar",
    "pillow", "pioneer", "plaza", "plumber", "pocket", "pond", "porch", "postcard",
    "pottery", "prairie", "pulley", "puppet", "quarry", "quilt", "rabbit", "radar", "raft",
    "ranch", "ravine", "reef", "ribbon", "ridge", "river", "saddle", "sailor", "salmon",
    "satchel", "school", "scooter", "shelter", "shovel", "silo", "sketch", "sleigh",
    "slope", "spindle", "spruce", "stable", "stadium", "statue", "steamer", "stove",
    "studio", "summit", "tavern", "teapot", "temple", "tent", "terrace", "thimble",
    "thistle", "timber", "tower", "tractor", "trail", "tram", "trolley", "trumpet",
    "tunnel", "turbine", "turnip", "valley", "vault", "velvet", "village", "vineyard",
    "violin", "wagon", "walnut", "wharf", "wheat", "willow", "windmill", "workshop",
    "yacht", "yard", "absorb", "adapt", "admire", "advise", "align", "amend", "annotate",
    "anoint", "approve", "arrange", "ascend", "attach", "awaken", "bake", "banish",
    "barter", "berate", "bleach", "borrow", "bounce", "braid", "brew", "brighten",
    "broaden", "browse", "brush", "buckle", "budge", "bury", "calibrate", "carve",
    "catalogue", "chart", "chill", "chisel", "churn", "circle", "clasp", "climb", "cluster",
    "coax", "comb", "compress", "condense", "confirm", "consult", "contain", "cook",
    "crack", "crumble", "cultivate", "curb", "curl", "dazzle", "decorate", "deepen",
    "defrost", "delay", "deliver", "depict", "detect", "devise", "dilute", "direct",
    "discover", "dispatch", "dissolve", "divert", "draft", "drain", "dredge", "drizzle",
    "dust", "echo", "edit", "embed", "embroider", "emerge", "enlarge", "enlist", "enrich",
    "escort", "etch", "examine", "excavate", "expand", "explore", "fasten", "ferment",
    "finish", "flatten", "flavor", "flourish", "fluff", "forge", "frame", "freshen",
    "frost", "furnish", "garnish", "glaze", "glide", "glow", "govern", "graze", "greet",
    "grind", "guard", "harden", "haul", "heal", "heat", "hoist", "hover", "hum", "ignite",
    "illustrate", "imprint", "inflate", "inform", "insulate", "invest", "irrigate", "jog",
    "juggle", "kindle", "knead", "knit", "lace", "launch", "lengthen", "lift", "lighten",
    "mend", "mentor", "mingle", "mold", "mount", "narrate", "navigate", "nudge", "observe",
    "outline", "paint", "patrol", "pave", "peel", "persuade", "pilot", "plant", "pluck",
    "plow", "polish", "ponder", "pour", "preserve", "press", "prune", "punch", "quench",
    "radiate", "ramble", "ration", "rebuild", "recite", "recruit", "refine", "reinforce",
    "relay", "renovate", "repaint", "rescue", "restore", "retrieve", "rinse", "ripen",
    "roast", "rotate", "sail", "salvage", "sample", "sand", "scour", "scout", "sculpt",
    "season", "sharpen", "shepherd", "sift", "simmer", "soak", "soften", "solder",
    "sort_of", "sow", "sprinkle", "sprout", "squeeze", "steer", "stir", "stitch",
    "strengthen", "stroll", "sweep", "swivel", "tame", "thaw", "thread", "tighten", "toast",
    "trace_out", "translate", "transplant", "trek", "tune", "tutor", "unfold", "unravel",
    "uproot", "varnish", "ventilate", "verify", "wander", "warm", "water", "weave", "weed",
    "whisk", "whittle", "widen", "wrap",
)  # fmt: skip
"""Common English nouns and verbs that no task uses, as a name or as any other identifier of
a training task's code: new names of the kind the held-out split has (`kitchen`, `appraise`),
where syllable strings (`poncelis`) are of a kind no task has. The policy of 2026-12-04
copied syllable names at 0.88 and held-out words at 0.50 (docs/rl/2026-12-04-heldout-new-
names.md): a word is tokens the corpus and the training names also hold, so recall competes
with copying on it, as it does on a held-out name."""

VALIDATION_EVERY_WORD = 4
"""One word in this many (by a hash of the word) names only validation tasks."""


def _word_for_validation(word: str) -> bool:
    digest = hashlib.sha256(f"validation-word:{word}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % VALIDATION_EVERY_WORD == 0


VALIDATION_WORDS = tuple(w for w in WORDS if _word_for_validation(w))
"""The words `validation_words` tasks are named with, and no demonstration: a proxy named
with words a demonstration used would measure recall again, as held-out must not."""

TRAINING_WORDS = tuple(w for w in WORDS if not _word_for_validation(w))
"""The words demonstrations are named with (`sft.invented_names = "words"`)."""

WIDE_WORDS = tuple(
    (resources.files("composer_rl.tasks") / "wide_words.txt").read_text("utf-8").split()
)
"""3,527 common English words (`scripts/make_wide_words.py`: wordfreq's most frequent ones
that the standard library's source also uses), none of `WORDS`, no task name, identifier of
a task's code or Python name. With 371 training words each word names about four
demonstrations and could be learnt as a name; drawn from thousands, a name is seen once or
twice, and only copying gets it right. Measured, it did not make the policy copy new words
(docs/rl/2026-12-05-wide-words.md)."""

NameKind = Literal["syllables", "words", "wide_words", "validation_words"]
"""How invented names are made: syllable strings, or words of `TRAINING_WORDS`, of
`WIDE_WORDS` or of `VALIDATION_WORDS`."""

TASK_NAMES = frozenset(name.lower() for pool in (*POOLS.values(), FLAGS, CLASSES) for name in pool)
"""Every name the task suite uses, in either split: never invented."""

RESERVED_NAMES = frozenset(
    {*keyword.kwlist, *dir(builtins), *sys.stdlib_module_names, "test", "tests", "app"}
)


def is_free_name(name: str) -> bool:
    """Whether `name` may be invented: no task name, keyword, builtin or standard-library
    module, and no `test*` name, which pytest collects as a test wherever a visible test
    imports it (a function renamed `tester` failed its oracle's visible run, 2026-12-05)."""
    return name not in TASK_NAMES and name not in RESERVED_NAMES and not name.startswith("test")


def invented_name(rng: random.Random, kind: NameKind = "syllables") -> str:
    """A lower-case identifier (two to four syllables, or a word of `kind`'s half of `WORDS`) that no task,
    keyword, builtin or standard-library module uses."""
    while True:
        if kind == "words":
            name = rng.choice(TRAINING_WORDS)
        elif kind == "wide_words":
            name = rng.choice(WIDE_WORDS)
        elif kind == "validation_words":
            name = rng.choice(VALIDATION_WORDS)
        else:
            name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if is_free_name(name):
            return name


def _styled_like(original: str, name: str) -> str:
    """`name` in the case of `original`: constants upper, classes capitalized."""
    if original.isupper():
        return name.upper()
    if original[:1].isupper():
        return name.capitalize()
    return name


def _renamed(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        return mapping[value]
    if isinstance(value, list | tuple):
        return type(value)(_renamed(item, mapping) for item in value)
    return value


TEMPLATES_BY_NAME: Mapping[str, Template] = {t.name: t for t in BUILTIN_TEMPLATES}


def with_invented_names(
    task: Task, rng: random.Random, kind: NameKind = "syllables"
) -> Task | None:
    """`task` rendered again with each of its names (`Template.name_params`) replaced by an
    invented one, the same name by the same everywhere; None for a task of no built-in
    template, with no names, or whose template looks its names up in the vocabulary while
    rendering (it cannot take a name the vocabulary lacks). The task is of the training split whatever the invented
    names would hash to (`metadata["names"] == "invented"`)."""
    template = TEMPLATES_BY_NAME.get(str(task.metadata.get("template")))
    if template is None or not template.name_params or task.split != Split.TRAIN.value:
        return None
    params = dict(task.metadata["params"])
    originals = sorted({n for key in template.name_params for n in name_values(params.get(key))})
    if not originals:
        return None
    mapping: dict[str, str] = {}
    taken: set[str] = set()
    for original in originals:
        # Template names hash into a split one by one, and a task's names must share one
        # (`split_of`): an invented name is drawn again until it hashes to training.
        name = _styled_like(original, invented_name(rng, kind))
        while name in taken or name_split(name) != Split.TRAIN:
            name = _styled_like(original, invented_name(rng, kind))
        taken.add(name)
        mapping[original] = name
    for key in template.name_params:
        if key in params:
            params[key] = _renamed(params[key], mapping)
    try:
        invented = template.build(params, split=Split.TRAIN)
    except (ValueError, KeyError, IndexError):
        return None  # the template derives more names from the vocabulary (fix_ci's package)
    invented.metadata["names"] = "invented"
    invented.metadata["renamed_from"] = task.id
    return invented


def invented_name_tasks(
    tasks: Sequence[Task], count: int, seed: int, kind: NameKind = "syllables"
) -> list[Task]:
    """`count` tasks, each one of `tasks` (drawn in turn from a seeded shuffle) rendered with
    invented names; the same for the same arguments on every machine."""
    rng = random.Random(seed)
    order = [t for t in tasks if TEMPLATES_BY_NAME.get(str(t.metadata.get("template")))]
    rng.shuffle(order)
    chosen: list[Task] = []
    for index in range(len(order) * 2):
        if len(chosen) >= count or not order:
            break
        invented = with_invented_names(order[index % len(order)], rng, kind)
        if invented is not None:
            chosen.append(invented)
    return chosen


def renamed_share(
    tasks: Sequence[Task], share: float, seed: int, kind: NameKind = "wide_words"
) -> list[Task]:
    """`tasks` in order, each of a renamable built-in template drawn anew with invented
    names with probability `share` (RL's `tasks.invented_names`); the others as they are.

    RL on the training split's names pays recall as much as copying: a policy that writes
    a training name from memory is rewarded for it, and a held-out task names nothing it
    has seen. On a task renamed with words no task uses, only the copy from the
    instruction is rewarded, and that is what a new name needs. The same tasks for the
    same arguments, so a resumed run samples the task list it was killed with."""
    rng = random.Random(seed)
    chosen: list[Task] = []
    for task in tasks:
        renamed = with_invented_names(task, rng, kind) if rng.random() < share else None
        chosen.append(renamed if renamed is not None else task)
    return chosen


__all__ = [
    "SYLLABLES",
    "TASK_NAMES",
    "TRAINING_WORDS",
    "VALIDATION_WORDS",
    "WIDE_WORDS",
    "WORDS",
    "NameKind",
    "invented_name",
    "invented_name_tasks",
    "is_free_name",
    "renamed_share",
    "with_invented_names",
]
