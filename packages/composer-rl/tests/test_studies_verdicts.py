"""Study verdicts: one vocabulary, enforced where a verdict is made, and the READMEs' study
tables saying exactly what each committed result.json says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from composer_rl.studies import STUDIES, VERDICT_LABELS, Verdict, check_verdict, router_replay

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs" / "studies"
TABLES = {ROOT / "README.md": "docs/studies/", DOCS / "README.md": ""}
"""README -> the prefix its study links carry before `NAME/`."""


def test_the_vocabulary_is_the_four_words() -> None:
    assert VERDICT_LABELS == ("held", "held in part", "did not hold", "undecided")


@pytest.mark.parametrize("label", ["held, weakly", "held for the mismatch", "Held", "yes", ""])
def test_a_verdict_outside_the_vocabulary_is_rejected(label: str) -> None:
    with pytest.raises(ValueError, match="not one of"):
        Verdict(label, "s", "t")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not one of"):
        check_verdict(label)


def test_held_in_part_and_undecided_must_say_which_part_or_what_they_rest_on() -> None:
    with pytest.raises(ValueError, match="which part held"):
        Verdict("held in part", "s", "t")
    with pytest.raises(ValueError, match="what it rests on"):
        Verdict("undecided", "s", "t", "  ")
    v = Verdict("held in part", "s", "t", "replay cut it; the guard did not")
    assert v.held is False and v.text == "held in part: replay cut it; the guard did not"
    assert Verdict("held", "s", "t").held is True
    assert Verdict("undecided", "s", "t", "rests on x").held is None


def _results() -> dict[str, dict]:  # type: ignore[type-arg]
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(DOCS.glob("*/result.json"))}


def test_every_committed_result_uses_the_vocabulary() -> None:
    results = _results()
    assert results, f"no result.json under {DOCS}"
    for name, result in results.items():
        assert name in STUDIES and result["study"] == name
        verdict = check_verdict(result["verdict"], result.get("verdict_detail", ""))
        assert result["held"] == verdict.held, name
        table = (DOCS / name / "table.md").read_text()
        detail = f": {verdict.detail}" if verdict.detail else ""
        assert f"**Verdict: {verdict.label}**{detail} (" in table, name


def _verdict_cells(readme: Path, prefix: str) -> dict[str, str]:
    """{study: the text of the last cell} of each table row that links a study."""
    cells = {}
    for line in readme.read_text().splitlines():
        m = re.match(rf"\| \[([a-z0-9-]+)\]\({re.escape(prefix)}\1/", line)
        if m:
            parts = re.split(r"(?<!\\)\|", line)
            cells[m.group(1)] = parts[-2].strip()
    return cells


@pytest.mark.parametrize("readme", list(TABLES), ids=lambda p: str(p.relative_to(ROOT)))
def test_readme_study_tables_match_each_result_json(readme: Path) -> None:
    cells = _verdict_cells(readme, TABLES[readme])
    assert set(cells) == set(STUDIES), f"{readme}: rows for {sorted(cells)}"
    results = _results()
    for name, cell in cells.items():
        if name in results:
            result = results[name]
            expected = check_verdict(result["verdict"], result.get("verdict_detail", "")).text
            assert cell == expected, f"{readme.name}, {name}: {cell!r} != result.json {expected!r}"
        else:  # no committed result: it cannot have held or not
            label, _, detail = cell.partition(": ")
            assert check_verdict(label, detail).label == "undecided", (name, cell)


def test_router_replay_without_the_guards_cut_is_held_in_part() -> None:
    """The committed case: replay cut the mismatch, the guard moved the p99 up, not down."""
    data = json.loads((DOCS / "router-replay" / "result.json").read_text())
    verdict = router_replay._verdict(data["numbers"]["rows"])
    assert verdict.label == "held in part" and "guard" in verdict.detail
    assert "0.137 -> 0.142" in verdict.detail


def test_cpt_vs_rl_rests_on_rl_learning() -> None:
    """The committed numbers: a relation with CE, but RL's own gain within noise."""
    from composer_rl.studies import cpt_vs_rl

    data = json.loads((DOCS / "cpt-vs-rl" / "result.json").read_text())
    verdict = cpt_vs_rl.verdict(data["numbers"])
    assert verdict.label == "undecided" and verdict.detail.startswith("rests on RL learning")
    mean, se = cpt_vs_rl.rl_gain(data["numbers"])
    assert not mean - 2 * se > 0
