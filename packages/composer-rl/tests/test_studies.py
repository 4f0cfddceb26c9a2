"""`composer-rl study`: the list, the unimplemented studies, and the quick variants of the
implemented ones through the real command, checking the files and the numbers they hold."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from composer_kernels import nvfp4_quantize
from composer_rl import cli
from composer_rl.agent.quick import random_checkpoint
from composer_rl.rl.compare import heldout_tasks
from composer_rl.rl.config import load_config, to_toml
from composer_rl.studies import (
    NOT_IMPLEMENTED,
    STUDIES,
    Study,
    StudyOptions,
    check_verdict,
    cpt_vs_rl,
    length_penalty,
    nvfp4_invariance,
    router_replay,
    self_summary,
)
from composer_rl.studies.kl_estimators import measure_pair
from composer_rl.studies.rl_runs import WEIGHTS_RECORD, finished_history, weights_digest
from composer_rl.tasks import Edit, Task

ALL = [
    "cpt-vs-rl",
    "self-summary",
    "length-penalty",
    "kl-estimators",
    "router-replay",
    "nvfp4-invariance",
    "async",
    "behaviour-reward",
]


def test_list_shows_every_study_with_its_claim_and_state(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["study", "--list"]) == 0
    out = capsys.readouterr().out
    assert list(STUDIES) == ALL
    for name, study in STUDIES.items():
        assert name in out
        assert study.claim in out
    assert out.count("[ready]") == len(ALL)  # every study has its code
    assert NOT_IMPLEMENTED not in out


def test_an_unimplemented_study_says_so_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "cpt-vs-rl"
    study = STUDIES[name]
    monkeypatch.setitem(STUDIES, name, Study(study.name, study.claim, study.source))
    assert cli.main(["study", "--list"]) == 0
    assert NOT_IMPLEMENTED in capsys.readouterr().out
    out = tmp_path / name
    assert cli.main(["study", name, "--quick", "--out", str(out)]) == 2
    assert NOT_IMPLEMENTED in capsys.readouterr().err
    assert not out.exists()  # no result files for a study that did not run


def test_no_study_named_asks_for_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["study"]) == 2
    assert "--list" in capsys.readouterr().err


def test_an_unknown_study_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["study", "no-such-study"]) == 2
    assert "kl-estimators" in capsys.readouterr().err


def _quick(
    name: str,
    out: Path,
    capsys: pytest.CaptureFixture[str],
    *extra: str,
    printed: list[str] | None = None,
) -> dict[str, Any]:
    """Run a study's quick form and check its files; what it printed goes to `printed`."""
    assert cli.main(["study", name, "--quick", "--out", str(out), *extra]) == 0
    output = capsys.readouterr().out
    if printed is not None:
        printed.append(output)
    for file in ("table.md", "plot.png", "result.json"):
        assert (out / file).is_file(), file
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "table.md").read_text()
    assert table.strip() in output  # the table is printed as written
    result = json.loads((out / "result.json").read_text())
    assert result["study"] == name and result["quick"] is True
    verdict = check_verdict(result["verdict"], result["verdict_detail"])  # the vocabulary
    assert verdict.held == result["held"]
    assert result["wall_clock_s"] > 0 and result["command"].startswith(f"composer-rl study {name}")
    assert f"**Verdict: {verdict.label}**" in table and "Wall-clock:" in table
    return result


def test_nvfp4_invariance_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _quick("nvfp4-invariance", tmp_path / "nv", capsys)
    numbers = result["numbers"]
    bits = numbers["bits"]
    per_token = [b for b in bits if b["mode"] == "per_token"]
    per_tensor = [b for b in bits if b["mode"] == "per_tensor"]
    # Per-token scaling: the same rows have the same bits in every batch.
    assert all(b["bits_differing"] == 0 and b["codes_differing"] == 0 for b in per_token)
    # Per-tensor: a batch that moves the amax changes them; one that does not, does not.
    by_context = {b["context"]: b for b in per_tensor}
    assert by_context["with one outlier token"]["bits_differing"] > 0
    assert by_context["with louder tokens"]["block_scales_differing"] > 0
    assert by_context["with quieter tokens"]["bits_differing"] == 0
    change = numbers["max_logprob_change"]
    assert change["per_tensor"] > 1000 * change["per_token"]
    assert change["per_token"] < 1e-5  # float round-off, no FP4 code moved
    # ...and, where the high-precision control changed nothing, only by float32 round-off
    # (on some CPUs the control is bit-identical packed and alone; the per-token path's
    # GEMMs over more rows still round differently).
    assert numbers["per_token_changes_beyond_control_are_roundoff"] is True
    assert all("changed_at" not in r for r in numbers["logprobs"])
    assert result["held"] is True


def test_kl_estimators_quick_with_an_rl_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "rl"
    run.mkdir()
    rows = [
        {"step": s, "kl_k1": 0.01 * s, "kl_k3": 0.012 * s, "kl_k1_var": 1e-3, "kl_k3_var": 1e-3 * s}
        for s in range(1, 4)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = _quick("kl-estimators", tmp_path / "kl", capsys, "--run-dir-of-rl", str(run))
    numbers = result["numbers"]
    for name, family in numbers["families"].items():
        # k3 is the quieter estimator near the reference and the noisier one far from it.
        assert family["var_ratio_at_min"] < 1, name
        assert family["k3_var_at_max"] > family["k1_var_at_max"], name
        assert family["k3_sd_sampled_at_max"] > family["k1_sd_sampled_at_max"], name
    for pair in numbers["pairs"]:  # the sampled k1 mean is an unbiased estimate of the KL
        assert (
            abs(pair["k1_mean_sampled"] - pair["kl"]) < 5 * pair["k1_var"] ** 0.5 / 4000**0.5 + 1e-9
        )
    assert numbers["rl_run"]["steps"] == 3 and numbers["rl_run"]["kl_k3_last"] == pytest.approx(
        0.036
    )
    # The run's per-token variances: k3's is above k1's at steps 2 and 3 only.
    assert numbers["rl_run"]["kl_k3_var_last"] == pytest.approx(3e-3)
    assert numbers["rl_run"]["steps_k3_var_above_k1_var"] == 2
    assert "--run-dir-of-rl" in result["command"]
    assert result["held"] is True


def test_kl_estimators_skips_the_run_panel_without_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _quick(
        "kl-estimators", tmp_path / "kl", capsys, "--run-dir-of-rl", str(tmp_path / "none")
    )
    assert result["numbers"]["rl_run"] is None
    assert any("panel is skipped" in note for note in result["notes"])


def test_exact_kl_statistics_match_a_hand_computed_pair() -> None:
    # pi = (0.5, 0.5), pi_ref = (0.25, 0.75): KL = 0.5 ln 2 + 0.5 ln(2/3).
    logp = torch.tensor([0.5, 0.5], dtype=torch.float64).log()
    ref = torch.tensor([0.25, 0.75], dtype=torch.float64).log()
    stats = measure_pair("hand", 0.0, logp, ref, 2000, torch.Generator().manual_seed(0))
    kl = 0.5 * torch.log(torch.tensor(2.0)) + 0.5 * torch.log(torch.tensor(2 / 3))
    assert stats.kl == pytest.approx(float(kl))
    k1 = [float(torch.log(torch.tensor(2.0))), float(torch.log(torch.tensor(2 / 3)))]
    assert stats.k1_var == pytest.approx(0.25 * (k1[0] - k1[1]) ** 2)
    k3 = [
        0.5 - 1 + float(torch.log(torch.tensor(2.0))),
        1.5 - 1 - float(torch.log(torch.tensor(1.5))),
    ]
    assert stats.k3_var == pytest.approx(0.25 * (k3[0] - k3[1]) ** 2)


def test_bit_differences_count_the_changed_bits() -> None:
    rows = torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
    alone = nvfp4_quantize(rows, scale_mode="per_tensor")
    louder = torch.cat([rows, 100 * rows[:1]])
    diff = nvfp4_invariance.bit_differences(
        alone, nvfp4_quantize(louder, scale_mode="per_tensor"), torch.arange(4)
    )
    assert diff["rows_global_scale_differing"] == 4 and diff["bits_differing"] > 0
    same = nvfp4_invariance.bit_differences(
        nvfp4_quantize(rows), nvfp4_quantize(louder), torch.arange(4)
    )
    assert same["bits_differing"] == 0
    assert same["bits"] == 8 * (4 * 16 + 4 * 2 + 4 * 4)  # codes, block scales, FP32 scale


def test_router_replay_mismatch_quick() -> None:
    rows = {
        (r["engine"], r["mode"]): r
        for r in router_replay.measure(StudyOptions(quick=True), router_replay.QUICK)
    }
    # Same numerics: only the decode path differs, so the gap is fp32 round-off either way.
    assert rows[("fp32", "replay off")]["mean_abs"] < 1e-5
    # A bf16 engine routes some tokens differently; replaying its experts removes those
    # flips, so the mean and the tail of the gap fall (it would not if replay were ignored).
    off = rows[("bf16", "replay off")]
    replayed = rows[("bf16", "replay, no guard")]
    assert off["routing_differs_share"] > 0
    assert replayed["mean_abs"] < off["mean_abs"]
    assert replayed["p99_abs"] < off["p99_abs"]
    assert replayed["max_abs"] < off["max_abs"]
    # Every row scored the same sampled tokens.
    assert len({r["tokens"] for r in rows.values()}) == 1
    assert 0 <= rows[("bf16", "replay + guard 0.1")]["guard_replacement_rate"] <= 1
    # Replay's half held; the guard's half holds only if it cut the p99 further.
    guarded = rows[("bf16", "replay + guard 0.1")]
    verdict = router_replay._verdict(list(rows.values()))
    assert verdict.label == ("held" if guarded["p99_abs"] < replayed["p99_abs"] else "held in part")


@pytest.mark.slow  # the mismatch half, then two RL runs and three scorings (about 30 s idle)
def test_router_replay_quick_trains_with_replay_on_and_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    result = _quick("router-replay", tmp_path / "rr", capsys, "--work-dir", str(work))
    assert result["verdict"] in ("held", "held in part")  # in part: the guard's half
    learning = result["numbers"]["learning"]
    on, off = learning["variants"]["replay on"], learning["variants"]["replay off"]
    steps = learning["sizes"]["steps"]
    assert on["steps"] == off["steps"] == steps == 4
    # The two runs differ in router replay only, and their engines got bf16 weights.
    for name, replay in (("replay-on", True), ("replay-off", False)):
        config = load_config(work / "learning" / name / "config.toml", {})
        assert config.loss.router_replay is replay
        assert config.train.publish_dtype == "bfloat16"
        assert config.tasks.source == work / "learning" / "tasks.jsonl"
    assert off["replay_replacements"] == 0
    # bf16-rounded weights on the engine: the trainer's logprobs differ from the engine's.
    assert on["logprob_mismatch"] > 0 and off["logprob_mismatch"] > 0
    for variant in (on, off):
        assert variant["gain"]["sampled"]["tasks"] == len(learning["tasks"]) == 2
        assert sum(n for _, _, n in variant["curve"]) == steps * 2  # every episode counted
    table = (tmp_path / "rr" / "table.md").read_text()
    assert "Effect on learning" in table and "replay on - off" in table
    # A rerun on the same work directory reuses both finished runs.
    again = _quick("router-replay", tmp_path / "rr2", capsys, "--work-dir", str(work))
    variants = again["numbers"]["learning"]["variants"]
    assert variants["replay on"]["reused"] and variants["replay off"]["reused"]


@pytest.mark.slow  # two RL runs and a warm-up (about 20 s on an idle box, twice that loaded)
def test_async_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    printed: list[str] = []
    result = _quick("async", tmp_path / "async", capsys, printed=printed)
    # Off a terminal each RL run the study trains reports its steps as plain lines (a log of
    # `composer-rl study async > log` showed nothing until the table).
    for mode in ("sync", "async"):
        assert f"{mode}: start, to 3 steps" in printed[0], mode
        assert re.search(rf"^{mode}: done, 3/3 steps \(100%\).*steps/s", printed[0], re.M), mode
    sync, asynchronous = (result["numbers"]["results"][m] for m in ("sync", "async"))
    # Equal trained samples, so the wall-clock ratio compares like with like.
    assert sync["steps"] == asynchronous["steps"] == 3
    assert sync["trained_sequences"] == asynchronous["trained_sequences"] > 0
    # Alternating means every trained token was sampled by the version being trained.
    assert set(sync["token_lag_hist"]) == {"0"} and sync["token_lag_max"] == 0
    assert sum(asynchronous["token_lag_hist"].values()) > 0
    assert asynchronous["token_lag_max"] <= 3  # the staleness bound held
    assert result["numbers"]["ratio_sync_over_async"] == pytest.approx(
        sync["seconds"] / asynchronous["seconds"]
    )


def _episode(
    task: str,
    difficulty: int,
    tokens: int,
    turns: int,
    solved: bool,
    version: int,
    length: float = -0.05,
) -> dict[str, Any]:
    return {
        "task": task,
        "difficulty": difficulty,
        "generated_tokens": tokens,
        "turns": turns,
        "solved": solved,
        "versions": [version],
        "reward": 1.0,
        "components": {"length": length},
    }


def test_length_penalty_compares_the_same_tasks_paired_by_task() -> None:
    late = {
        "concave": [
            _episode("a", 1, 50, 2, True, 5),
            _episode("a", 1, 70, 2, True, 5),
            _episode("b", 2, 200, 4, False, 5),
            _episode("only-here", 1, 10, 1, True, 5),  # not attempted by every variant
        ],
        "linear": [_episode("a", 1, 40, 2, True, 5), _episode("b", 2, 100, 3, False, 5)],
        "none": [
            _episode("a", 1, 100, 3, True, 5),
            _episode("a", 1, 120, 3, False, 5),
            _episode("b", 2, 220, 4, True, 5),
        ],
    }
    result = length_penalty.compare(late)
    assert result["common_tasks"] == 2
    easy = result["difficulties"]["1"]
    assert easy["tasks"] == 1 and easy["variants"]["concave"]["episodes"] == 2
    assert easy["variants"]["concave"]["generated_tokens"][0] == pytest.approx(60.0)
    assert easy["variants"]["none"]["solved"][0] == pytest.approx(0.5)
    # Per task: concave's mean (60) minus none's mean (110) on task a.
    assert easy["vs_none"]["concave"]["generated_tokens"][0] == pytest.approx(-50.0)
    assert easy["vs_none"]["linear"]["turns"][0] == pytest.approx(-1.0)
    hard = result["difficulties"]["2"]
    assert hard["vs_none"]["concave"]["solved"][0] == pytest.approx(-1.0)
    assert hard["vs_none"]["linear"]["generated_tokens"][0] == pytest.approx(-120.0)


def test_length_penalty_linear_weight_matches_the_concave_penalty_at_x_ref() -> None:
    from composer_rewards import length_cost
    from composer_rewards.rewards.length import LengthSettings

    settings = LengthSettings()
    costs = [length_cost(x, settings.k, settings.q) for x in (100.0, 400.0, 900.0)]
    first = [
        _episode(t, 1, 0, 0, False, 0, length=-settings.weight * c)
        for t, c in zip("abc", costs, strict=True)
    ]
    later = [_episode("d", 1, 0, 0, False, 1, length=-1.0)]  # not the starting policy
    x_ref = length_penalty.reference_x(first + later, settings)
    assert x_ref == pytest.approx(400.0)
    weight = length_penalty.linear_weight(settings, x_ref)
    assert weight * x_ref == pytest.approx(settings.weight * costs[1])
    assert length_penalty.late_episodes(first + later, steps=2) == later


@pytest.mark.slow  # three RL runs, twice analysed (about a minute)
def test_length_penalty_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "runs"
    assert (
        cli.main(
            [
                "study",
                "length-penalty",
                "--quick",
                "--out",
                str(tmp_path / "lp"),
                "--work-dir",
                str(work),
            ]
        )
        == 0
    )
    capsys.readouterr()
    result = json.loads((tmp_path / "lp" / "result.json").read_text())
    numbers = result["numbers"]
    # Three real runs of the loop, the same number of steps each, kept in --work-dir.
    assert numbers["steps_trained"] == {"concave": 8, "linear": 8, "none": 8}
    for variant in ("concave", "linear", "none"):
        assert (work / variant / "episodes" / "episodes.jsonl").is_file()
    # Each run read the length settings it was given.
    assert numbers["settings"]["none"]["weight"] == 0.0
    assert numbers["settings"]["linear"]["k"] == 0.0
    assert numbers["x_ref"] > 0
    none_eps = length_penalty.read_episodes(work / "none")
    assert all(e["components"].get("length", 0.0) == 0.0 for e in none_eps)
    linear_eps = length_penalty.read_episodes(work / "linear")
    assert any(e["components"]["length"] < 0 for e in linear_eps)
    assert (tmp_path / "lp" / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for counts in numbers["groups"].values():
        assert counts["generated"] >= 8 and 0 <= counts["mixed_correctness"] <= counts["generated"]
    assert numbers["reused_runs"] == []
    # Run again on the same --work-dir: the finished runs are analysed, not rerun.
    again = tmp_path / "lp-again"
    assert (
        cli.main(
            ["study", "length-penalty", "--quick", "--out", str(again), "--work-dir", str(work)]
        )
        == 0
    )
    capsys.readouterr()
    second = json.loads((again / "result.json").read_text())["numbers"]
    assert second["reused_runs"] == ["concave", "linear", "none"]
    assert second["comparison"] == numbers["comparison"]


def _comparison(
    easy_tokens: tuple[float, float], hard_solved: tuple[float, float]
) -> dict[str, Any]:
    """A `compare` result with the two numbers the verdict reads (the rest zero)."""

    def diffs(tokens: tuple[float, float], solved: tuple[float, float]) -> dict[str, Any]:
        return {"generated_tokens": tokens, "turns": (0.0, 0.1), "solved": solved}

    return {
        "comparison": {
            "common_tasks": 40,
            "difficulties": {
                "1": {
                    "vs_none": {v: diffs(easy_tokens, (0.0, 0.01)) for v in ("concave", "linear")}
                },
                "2": {
                    "vs_none": {v: diffs((0.0, 1.0), hard_solved) for v in ("concave", "linear")}
                },
            },
        }
    }


def test_length_penalty_verdict_needs_shorter_easy_episodes_and_kept_hard_solve_rates() -> None:
    verdict = length_penalty._verdict
    assert verdict(_comparison((-12.0, 4.0), (-0.01, 0.02))).held is True
    assert verdict(_comparison((-6.0, 4.0), (0.0, 0.02))).held is False  # within 2 s.e.
    assert verdict(_comparison((+10.5, 4.0), (0.0, 0.02))).held is False  # longer
    assert verdict(_comparison((-12.0, 4.0), (-0.05, 0.02))).held is False  # hard tasks lost
    assert verdict({"comparison": {"common_tasks": 0, "difficulties": {}}}).held is None


def test_length_penalty_counts_groups_by_correctness() -> None:
    episodes = [
        {"group": "g1", "solved": True},
        {"group": "g1", "solved": False},
        {"group": "g2", "solved": False},
        {"group": "g2", "solved": False},
    ]
    counts = length_penalty.group_counts(episodes, [{"count_groups_constant": 3}])
    assert counts == {"generated": 2, "mixed_correctness": 1, "dropped_constant": 3}


# --- self-summary --------------------------------------------------------------------------


def _task(instruction: str, edits: list[Edit]) -> Task:
    return Task(
        id="t",
        category="debugging",
        difficulty=1,
        instruction=instruction,
        files={"pricing.py": "def scale(amount):\n    return amount\n"},
        tests={"_grading/test_t.py": "def test_t():\n    pass\n"},
        solution=edits,
    )


def test_needed_facts_are_what_the_solution_needs_and_the_instruction_does_not_say() -> None:
    edit = Edit(path="pricing.py", old="def scale(amount):", new="def scale(amount, k):")
    task = _task("Add a factor to scale in pricing.py.", [edit, Edit(path="new.py", new="x = 1\n")])
    # The path is in the instruction; the replaced text and the new file's path are not.
    assert self_summary.needed_facts(task) == ["def scale(amount):", "new.py"]
    facts = self_summary.needed_facts(task)
    assert self_summary.carried(facts, "Read pricing.py. To do: replace def scale(amount):") == 0.5
    assert self_summary.carried(facts, "def scale(amount): ... write new.py") == 1.0
    assert self_summary.carried([], "anything") == 1.0


def _row(task: str, solved: bool, compactions: int, carried: list[float]) -> dict[str, Any]:
    return {
        "task": task,
        "difficulty": 1,
        "solved": solved,
        "generated_tokens": 100,
        "compactions": compactions,
        "stop_reason": "finish",
        "facts": 2,
        "carried": carried,
    }


def test_self_summary_compares_the_tasks_both_modes_compacted_paired_by_task() -> None:
    reference = [_row("a", True, 0, []), _row("b", True, 0, []), _row("c", False, 0, [])]
    rows = {
        "summarize": [
            _row("a", True, 1, [1.0]),
            _row("b", True, 2, [1.0, 0.5]),
            _row("c", False, 0, []),  # never compacted: left out of the paired set
        ],
        "truncate": [
            _row("a", False, 1, [0.5]),
            _row("b", True, 1, [1.0]),
            _row("c", True, 1, [0.0]),
        ],
    }
    result = self_summary.compare_budget(rows, reference)
    assert result["tasks"] == 3 and result["compacted_in_both"] == 2
    summarize, truncate = result["variants"]["summarize"], result["variants"]["truncate"]
    assert summarize["pass1"][0] == pytest.approx(2 / 3)
    assert summarize["pass1_compacted"][0] == pytest.approx(1.0)
    assert truncate["pass1_compacted"][0] == pytest.approx(0.5)
    assert summarize["compacted"][0] == pytest.approx(2 / 3)
    assert summarize["all_facts_carried"][0] == pytest.approx(2 / 3)  # 2 of 3 compactions
    assert truncate["facts_recall"][0] == pytest.approx(0.5)
    assert summarize["tokens_per_solved"] == pytest.approx(150.0)
    assert result["summarize_minus_truncate"][0] == pytest.approx(0.5)
    assert result["error"]["truncate"][0] == pytest.approx(0.5)  # none solved a and b
    assert result["error"]["summarize"][0] == pytest.approx(0.0)


def _compacted_budgets(
    *diffs: tuple[float, float], solved: tuple[int, ...] = (20, 20)
) -> dict[str, Any]:
    """A `run_budgets` result with what the verdict reads: each budget's paired difference
    and how many of its 50 compacted tasks the policy solves without a budget."""
    return {
        "budgets": {
            str(b): {
                "summarize_minus_truncate": d,
                "compacted_in_both": 50,
                "variants": {"none": {"pass1_compacted": (k / 50, 0.05)}},
                "error": {"summarize": (0.1, 0.05), "truncate": (0.2, 0.05)},
            }
            for b, d, k in zip((320, 448), diffs, solved, strict=False)
        }
    }


def test_self_summary_verdict_needs_summaries_ahead_beyond_two_se_at_every_budget() -> None:
    assert self_summary.verdict(_compacted_budgets((0.2, 0.05), (0.15, 0.05))).held is True
    assert (
        self_summary.verdict(_compacted_budgets((0.2, 0.05), (0.05, 0.05))).label == "held in part"
    )
    assert self_summary.verdict(_compacted_budgets((-0.2, 0.05), (0.2, 0.05))).held is False
    assert self_summary.verdict(_compacted_budgets((0.2, math.nan))).held is None


def test_self_summary_verdict_judges_only_budgets_with_solved_tasks_to_lose() -> None:
    """A policy that solves (almost) nothing without a budget cannot lose tasks to
    compaction: undecided, not a tie, and a budget without such tasks is not judged."""
    few = self_summary.MIN_SOLVED_WITHOUT_BUDGET - 1
    nothing = self_summary.verdict(_compacted_budgets((0.0, 0.02), (0.02, 0.02), solved=(1, few)))
    assert nothing.label == "undecided" and nothing.held is None
    assert "320: 1 of 50, 448: 4 of 50" in nothing.strength
    # 448 has too few: only 320 is judged, where summaries lead beyond 2 s.e.
    judged = self_summary.verdict(_compacted_budgets((0.2, 0.05), (-0.3, 0.05), solved=(20, few)))
    assert judged.label == "held"
    assert f"not judged: {few} solved without one" in judged.summary
    enough = self_summary.MIN_SOLVED_WITHOUT_BUDGET
    both = self_summary.verdict(_compacted_budgets((0.2, 0.05), (-0.3, 0.05), solved=(20, enough)))
    assert both.held is False  # truncation leads at 448, now judged


def test_self_summary_keeps_its_episodes_and_replays_only_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a work directory a rerun judges the kept episodes again (a verdict rule changed)
    without playing them; other weights, tasks or runner settings are played anew."""
    model = random_checkpoint(tmp_path / "model", 0)
    tasks = [t for t in heldout_tasks(1) if t.difficulty == 1][:2]
    keep = tmp_path / "work" / "truncate@320.json"
    rows = self_summary.run_variant(model, tasks, "truncate", 320, keep)
    assert [r["task"] for r in rows] == [t.id for t in tasks]
    kept = json.loads(keep.read_text())
    assert kept["weights"] == weights_digest(model) and kept["rows"] == rows

    played: list[int] = []
    real_run_eval = self_summary.run_eval

    def counting_run_eval(*args: Any, **kwargs: Any) -> Any:
        played.append(len(args[1]))
        return real_run_eval(*args, **kwargs)

    monkeypatch.setattr(self_summary, "run_eval", counting_run_eval)
    assert self_summary.run_variant(model, tasks, "truncate", 320, keep) == rows
    assert played == []  # reused
    self_summary.run_variant(model, tasks[:1], "truncate", 320, keep)  # other tasks
    self_summary.run_variant(model, tasks[:1], "truncate", 448, keep)  # other budget
    assert played == [1, 1]
    random_checkpoint(model, 1)  # other weights at the same path
    self_summary.run_variant(model, tasks[:1], "truncate", 448, keep)
    assert played == [1, 1, 1]
    keep.write_text(keep.read_text()[:40])  # cut short by a kill
    self_summary.run_variant(model, tasks[:1], "truncate", 448, keep)
    assert played == [1, 1, 1, 1]
    assert self_summary.run_variant(model, tasks[:1], "truncate", 448, keep)  # kept again
    assert played == [1, 1, 1, 1]


@pytest.mark.slow  # three evaluations of seven tasks (about a minute)
def test_self_summary_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _quick("self-summary", tmp_path / "ss", capsys)
    numbers = result["numbers"]
    budget = numbers["budgets"]["320"]
    # The same held-out tasks, run once without a budget and once per mode at it.
    assert budget["tasks"] == numbers["tasks"] == len(numbers["episodes"]["none"]) >= 5
    for key in ("none", "summarize@320", "truncate@320"):
        assert {e["task"] for e in numbers["episodes"][key]} == {
            e["task"] for e in numbers["episodes"]["none"]
        }
    assert all(e["compactions"] == 0 for e in numbers["episodes"]["none"])


# --- cpt-vs-rl -----------------------------------------------------------------------------


def test_a_finished_run_is_reused_only_under_its_config_and_from_the_same_weights(
    tmp_path: Path,
) -> None:
    model, run_dir = tmp_path / "sft" / "final", tmp_path / "rl"
    model.mkdir(parents=True)
    run_dir.mkdir()
    weights = model / "model.safetensors"
    weights.write_bytes(b"weights")
    config = load_config(None, {"model": str(model), "run_dir": str(run_dir), "loop.steps": 2})
    (run_dir / "config.toml").write_text(to_toml(config))
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    assert finished_history(run_dir, config) == [{"step": 1}, {"step": 2}]
    other = load_config(None, {"model": str(model), "run_dir": str(run_dir), "loop.steps": 3})
    assert finished_history(run_dir, other) is None  # another config, or too few steps
    # Without a record of the weights, a checkpoint written after the run is not reused.
    written = (run_dir / "config.toml").stat().st_mtime
    os.utime(weights, (written + 10, written + 10))
    assert finished_history(run_dir, config) is None
    # With one, the content decides: the same weights written again (a quick study's random
    # checkpoint) are reused, other weights at the same path (a longer SFT) are not.
    (run_dir / WEIGHTS_RECORD).write_text(str(weights_digest(model)) + "\n")
    assert finished_history(run_dir, config) == [{"step": 1}, {"step": 2}]
    weights.write_bytes(b"other weights")
    assert finished_history(run_dir, config) is None


def test_a_run_recorded_before_the_sections_were_nested_is_still_reused(tmp_path: Path) -> None:
    """A study run's config.toml written with the old keys ([train] lr and dp, [rollout]
    summary_budget, [loss] temperature) matches the same settings under the new ones."""
    model, run_dir = tmp_path / "sft" / "final", tmp_path / "rl"
    model.mkdir(parents=True)
    run_dir.mkdir()
    old = (Path(__file__).parent / "data" / "config_before_nesting.toml").read_text()
    (run_dir / "config.toml").write_text(
        old.replace('"MODEL"', json.dumps(str(model))).replace('"RUN"', json.dumps(str(run_dir)))
    )
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    settings = {"model": str(model), "run_dir": str(run_dir), "loop.steps": 2, "local": True}
    settings |= {"loop.upsample_hard_after": None, "eval.every": 0}
    # the rollout limits the file records (the defaults of its day, not of today's)
    settings |= {"rollout.max_turns": 10, "rollout.max_new_tokens": 160}
    settings |= {"rollout.summary.context_budget": 768}
    config = load_config(None, {**settings, "train.optim.lr": 3e-4})
    assert finished_history(run_dir, config) == [{"step": 1}, {"step": 2}]
    other = load_config(None, {**settings, "train.optim.lr": 1e-4})
    assert finished_history(run_dir, other) is None


def test_a_run_whose_epoch_ran_out_counts_as_finished_a_killed_one_not(tmp_path: Path) -> None:
    """A small task file can run out before `loop.steps` (constant groups are dropped):
    that run ended (run_rl exported final/) and is reused; one killed at the same step is
    not."""
    model, run_dir = tmp_path / "sft" / "final", tmp_path / "rl"
    model.mkdir(parents=True)
    run_dir.mkdir()
    config = load_config(None, {"model": str(model), "run_dir": str(run_dir), "loop.steps": 4})
    (run_dir / "config.toml").write_text(to_toml(config))
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    assert finished_history(run_dir, config) is None  # killed after step 2
    (run_dir / "final").mkdir()
    (run_dir / "final" / "tokenizer.json").write_text("{}")
    assert finished_history(run_dir, config) == [{"step": 1}, {"step": 2}]


def test_log_linear_fit_matches_numpy() -> None:
    import numpy as np

    xs = [2.0, 3.0, 4.5, 6.0, 2.0]
    ys = [0.9, 0.7, 0.55, 0.3, 0.8]
    fit = cpt_vs_rl.fit_log_linear(xs, ys)
    slope, intercept = np.polyfit(np.log(xs), ys, 1)
    assert fit["slope"] == pytest.approx(slope) and fit["intercept"] == pytest.approx(intercept)
    predicted = intercept + slope * np.log(xs)
    r2 = 1 - np.sum((ys - predicted) ** 2) / np.sum((ys - np.mean(ys)) ** 2)
    assert fit["r2"] == pytest.approx(r2)
    # The slope's standard error, from the residual variance over n - 2.
    lx = np.log(xs)
    se = np.sqrt(np.sum((ys - predicted) ** 2) / 3 / np.sum((lx - lx.mean()) ** 2))
    assert fit["slope_se"] == pytest.approx(se)
    assert math.isnan(cpt_vs_rl.fit_log_linear([2.0, 2.0, 2.0], [1.0, 2.0, 3.0])["slope"])
    # A run with no second-half episode (NaN) is left out, not counted as zero.
    with_gap = cpt_vs_rl.fit_log_linear([*xs, 8.0], [*ys, math.nan])
    assert with_gap["slope"] == pytest.approx(slope)


def _budgets(rewards: dict[float, list[float]]) -> dict[str, Any]:
    point = {"first_reward": (0.1, 0.01), "solved": (0.2, 0.02), "first_solved": (0.1, 0.01)}
    return {
        str(i): {
            "ce_cpt": ce,
            "rl": {str(s): {**point, "reward": (r, 0.02)} for s, r in enumerate(rs)},
        }
        for i, (ce, rs) in enumerate(rewards.items())
    }


def test_cpt_vs_rl_verdict_needs_a_falling_reward_beyond_two_se() -> None:
    falling = _budgets({5.0: [0.6, 0.58], 5.4: [0.5, 0.52], 5.8: [0.41, 0.4], 6.3: [0.3, 0.33]})
    result = {"budgets": falling, "fits": cpt_vs_rl.fits(falling)}
    assert result["fits"]["reward"]["slope"] < 0
    assert len(result["fits"]["reward"]["per_seed_slopes"]) == 2
    assert result["fits"]["reward_seed_sd"] > 0
    assert cpt_vs_rl.verdict(result).held is True
    flat = _budgets({5.0: [0.5, 0.3], 5.4: [0.3, 0.5], 5.8: [0.5, 0.3], 6.3: [0.3, 0.5]})
    assert cpt_vs_rl.verdict({"budgets": flat, "fits": cpt_vs_rl.fits(flat)}).held is False
    unsolved = _budgets({5.0: [0.6, 0.58], 5.4: [0.5, 0.52], 5.8: [0.41, 0.4], 6.3: [0.3, 0.33]})
    for budget in unsolved.values():
        for run in budget["rl"].values():
            run["solved"] = (0.0, 0.0)
    verdict = cpt_vs_rl.verdict({"budgets": unsolved, "fits": cpt_vs_rl.fits(unsolved)})
    assert verdict.held is None and "shaping" in verdict.summary
    rising = _budgets({5.0: [0.3], 5.4: [0.4], 5.8: [0.5], 6.3: [0.6]})
    assert cpt_vs_rl.verdict({"budgets": rising, "fits": cpt_vs_rl.fits(rising)}).held is False


def test_cpt_vs_rl_is_undecided_while_rl_has_not_learned() -> None:
    """The same falling relation, but each RL run ends where its SFT policy began (within
    noise): the relation may be SFT's own, so the claim about RL's reward rests on RL
    learning, which is not shown."""
    falling = _budgets({5.0: [0.6, 0.58], 5.4: [0.5, 0.52], 5.8: [0.41, 0.4], 6.3: [0.3, 0.33]})
    for i, run in enumerate(r for b in falling.values() for r in b["rl"].values()):
        run["first_reward"] = (run["reward"][0] + (0.02 if i % 2 else -0.02), 0.02)
    verdict = cpt_vs_rl.verdict({"budgets": falling, "fits": cpt_vs_rl.fits(falling)})
    assert verdict.label == "undecided" and verdict.held is None
    assert verdict.detail.startswith("rests on RL learning, not yet shown")


@pytest.mark.slow  # four stage ones and four RL runs (about two minutes)
def test_cpt_vs_rl_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "runs"
    result = _quick("cpt-vs-rl", tmp_path / "cpt", capsys, "--work-dir", str(work))
    budgets = result["numbers"]["budgets"]
    assert list(budgets) == ["2", "4", "8", "16"]
    # More pretraining, lower held-out CE: the x axis is real.
    ces = [b["ce_pretrain"] for b in budgets.values()]
    assert ces == sorted(ces, reverse=True)
    for steps, b in budgets.items():
        stage = work / f"stage1-pretrain{steps}"
        metrics = (stage / "pretrain" / "metrics.jsonl").read_text().splitlines()
        assert json.loads(metrics[-1])["step"] == int(steps)
        assert (work / f"rl-pretrain{steps}-seed0" / "episodes" / "episodes.jsonl").is_file()
        assert b["rl"]["0"]["late_episodes"] > 0
    # One tokenizer for every budget, so their CEs compare.
    tokenizers = {(work / f"stage1-pretrain{s}" / "tokenizer.json").read_bytes() for s in budgets}
    assert len(tokenizers) == 1
    # A rerun on the same --work-dir reuses every finished run.
    assert (
        cli.main(
            [
                "study",
                "cpt-vs-rl",
                "--quick",
                "--out",
                str(tmp_path / "again"),
                "--work-dir",
                str(work),
            ]
        )
        == 0
    )
    capsys.readouterr()
    again = json.loads((tmp_path / "again" / "result.json").read_text())["numbers"]
    assert again["reused_runs"] == [f"rl-pretrain{s}-seed0" for s in budgets]
    assert again["budgets"] == result["numbers"]["budgets"]
