"""One configuration system for every command (`composer_rl.config`): the same TOML format
and flag scheme for stage one, RL and evaluation, defaults < file < flags, one line naming
the full dotted key for a bad key or value, every knob once in `--help`, one default per
knob, and the configs that were unvalidated dataclasses validated."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from composer_rl.agent.summarize import SummaryConfig
from composer_rl.cli import build_parser, main
from composer_rl.config import CommandConfig, ConfigError, knobs, load_args, sections, to_toml
from composer_rl.rl.config import RLConfig, load_config
from composer_rl.stages.config import Stage1Config

STAGE1_TOML = """\
run_dir = "{run_dir}"
threads = 1

[pretrain]
steps = 30

[pretrain.optim]
lr = 0.002

[sft]
max_tasks = 50

[sft.demonstrations]
careful = 1.0
"""

RL_TOML = """\
run_dir = "{run_dir}"
threads = 2

[loop]
steps = 7

[train.optim]
lr = 0.0002

[train.parallel]
dp = 2

[rollout.summary]
mode = "truncate"
"""


def _parse(argv: list[str]) -> Any:
    return build_parser().parse_args(argv)


def _resolved(command: str, argv: list[str]) -> CommandConfig:
    """The configuration `composer-rl COMMAND ARGV` would run with (nothing started)."""
    from composer_rl.cli.eval import EvalCommandConfig

    root: type[CommandConfig] = {
        "rl": RLConfig,
        "eval": EvalCommandConfig,
        "stage1": Stage1Config,
        "pretrain": Stage1Config,
        "sft": Stage1Config,
    }[command]
    return load_args(root, _parse([command, *argv]))


def test_stage1_and_rl_read_the_same_toml_format(tmp_path: Path) -> None:
    stage1_file, rl_file = tmp_path / "stage1.toml", tmp_path / "rl.toml"
    stage1_file.write_text(STAGE1_TOML.format(run_dir=tmp_path / "s1"))
    rl_file.write_text(RL_TOML.format(run_dir=tmp_path / "rl"))

    stage1 = _resolved("stage1", ["--config", str(stage1_file)])
    assert isinstance(stage1, Stage1Config)
    assert stage1.run_dir == tmp_path / "s1" and stage1.threads == 1
    assert stage1.pretrain.steps == 30 and stage1.pretrain.optim.lr == 0.002
    # A section in the file changes only what it names: the rest keeps the phase's defaults.
    defaults = Stage1Config()
    assert stage1.pretrain.seq_len == defaults.pretrain.seq_len
    assert stage1.pretrain.optim.warmup_steps == defaults.pretrain.optim.warmup_steps
    assert stage1.sft.max_tasks == 50 and stage1.sft.optim == defaults.sft.optim
    assert stage1.sft.demonstrations.careful == 1.0
    assert stage1.sft.demonstrations.recovering == defaults.sft.demonstrations.recovering

    rl = _resolved("rl", ["--config", str(rl_file)])
    assert isinstance(rl, RLConfig)
    assert rl.run_dir == tmp_path / "rl" and rl.threads == 2 and rl.loop.steps == 7
    assert rl.train.optim.lr == 0.0002 and rl.train.parallel.dp == 2
    assert rl.train.optim.weight_decay == RLConfig().train.optim.weight_decay
    assert rl.rollout.summary is not None and rl.rollout.summary.mode == "truncate"
    assert rl.rollout.summary.context_budget == SummaryConfig().context_budget

    # pretrain and sft read the stage-one file too; every command's written configuration
    # is a file of the same format that reads back to the same configuration.
    for command in ("pretrain", "sft"):
        assert _resolved(command, ["--config", str(stage1_file)]) == stage1
    for command, config in (("stage1", stage1), ("rl", rl)):
        written = tmp_path / f"{command}-written.toml"
        written.write_text(to_toml(config))
        assert _resolved(command, ["--config", str(written)]) == config


def test_an_old_json_stage_file_with_its_old_keys_still_loads(tmp_path: Path) -> None:
    """JSON is read by the same code path, and keys renamed when sections were nested
    (`sft_max_tasks`, `demonstrations`, `train.lr`, ...) still load, in files and overrides."""
    old = tmp_path / "stage1.json"
    old.write_text(
        json.dumps(
            {
                "sft_max_tasks": 13,
                "long_context_factor": 4.0,
                "demonstrations": {"careful": 2.0},
                "pretrain": {"steps": 30},
            }
        )
    )
    config = _resolved("stage1", ["--config", str(old)])
    assert isinstance(config, Stage1Config)
    assert config.sft.max_tasks == 13 and config.long_context.factor == 4.0
    assert config.sft.demonstrations.careful == 2.0 and config.pretrain.steps == 30
    rl_file = tmp_path / "old-rl.toml"
    rl_file.write_text(
        "[train]\nlr = 0.001\ndp = 2\n\n[rollout]\nsummary_budget = 500\n\n[loss]\ntemperature = 1.0\n"
    )
    rl = _resolved("rl", ["--config", str(rl_file)])
    assert isinstance(rl, RLConfig)
    assert rl.train.optim.lr == 0.001 and rl.train.parallel.dp == 2
    assert rl.rollout.summary is not None and rl.rollout.summary.context_budget == 500


@pytest.mark.parametrize("command", ["stage1", "pretrain", "sft", "rl"])
def test_defaults_then_the_file_then_the_flags_given(tmp_path: Path, command: str) -> None:
    config_file = tmp_path / "config.toml"
    config_file.write_text(f'run_dir = "{tmp_path / "from-file"}"\nthreads = 3\n')
    plain = _resolved(command, [])
    assert plain.run_dir == (Path("runs/rl") if command == "rl" else Path("runs/stage1"))
    from_file = _resolved(command, ["--config", str(config_file)])
    # The file's run_dir wins over the default (the flag's default used to override it).
    assert from_file.run_dir == tmp_path / "from-file"
    assert from_file.threads == 3
    flagged = _resolved(
        command, ["--config", str(config_file), "--run-dir", str(tmp_path / "from-flag")]
    )
    assert flagged.run_dir == tmp_path / "from-flag" and flagged.threads == 3


@pytest.mark.parametrize(
    ("name", "text"), [("x.toml", 'run_dir = "runs/foo"\n'), ("x.json", '{"run_dir": "runs/foo"}')]
)
def test_stage1_runs_and_marks_the_run_directory_of_its_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str
) -> None:
    """`composer-rl stage1 --config x.json` (or x.toml) with run_dir "runs/foo" runs in
    runs/foo (it ran in runs/stage1, and marked runs/stage1 as taking no plugin requests)."""
    import composer_rl.stages.pretrain as pretrain
    import composer_rl.stages.sft as sft
    from composer_rl.plugins import read_state

    monkeypatch.chdir(tmp_path)
    seen: list[Path] = []

    def phase(name: str) -> Any:
        def run(config: Stage1Config, show: object) -> dict[str, Any]:
            seen.append(config.run_dir)
            return {"phase": name, "steps": 0, "seconds": 0.0}

        return run

    monkeypatch.setattr(pretrain, "run_pretrain", phase("pretrain"))
    monkeypatch.setattr(pretrain, "run_long_context", phase("long_context"))
    monkeypatch.setattr(sft, "run_sft", phase("sft"))
    (tmp_path / name).write_text(text)
    assert main(["stage1", "--config", name, "--no-progress"]) == 0
    assert seen == [Path("runs/foo")] * 3
    state = read_state(tmp_path / "runs" / "foo")
    assert state is not None and state.refusal and state.command == "stage1"
    assert not (tmp_path / "runs" / "stage1").exists()


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert "pydantic" not in err and "http" not in err, err
    return err


@pytest.mark.parametrize(
    ("command", "toml", "says"),
    [
        (
            "stage1",
            "[pretrain.optim]\nlrr = 0.1\n",
            "unknown key 'pretrain.optim.lrr' (did you mean pretrain.optim.lr?); "
            "pretrain.optim accepts betas, grad_clip, lr, min_lr_ratio, warmup_steps, "
            "weight_decay",
        ),
        (
            "rl",
            "[train.optim]\nlrr = 0.1\n",
            "unknown key 'train.optim.lrr' (did you mean train.optim.lr?); "
            "train.optim accepts betas, grad_clip, lr, min_lr_ratio, warmup_steps, "
            "weight_decay",
        ),
        ("rl", "[rollout]\nseeed = 1\n", "unknown key 'rollout.seeed'; rollout accepts "),
        ("eval", "[runner]\nmax_turn = 3\n", "unknown key 'runner.max_turn' (did you mean"),
        ("sft", "stepz = 3\n", "unknown key 'stepz'; the top level accepts "),
    ],
    ids=["stage1-nested", "rl-nested", "rl-no-close-match", "eval", "top-level"],
)
def test_a_bad_key_in_a_config_file_is_one_line_naming_it_and_what_is_accepted(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    toml: str,
    says: str,
) -> None:
    config_file = tmp_path / "bad.toml"
    config_file.write_text(toml)
    run_dir = tmp_path / "run"
    argv = [command, "--config", str(config_file), "--run-dir", str(run_dir)]
    assert main(argv) == 2
    err = _one_line_error(capsys)
    assert err.startswith(f"error: {config_file}: {says}"), err
    if "rollout accepts" in err:  # keys set from other knobs are not offered (the run's seed)
        assert "seed" not in err.split("rollout accepts")[-1]
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("argv", "toml", "says"),
    [
        (["stage1"], "[pretrain]\nsteps = 0\n", "{file}: pretrain.steps: Input should be greater than 0 (got 0)"),
        (["stage1", "--pretrain.steps", "0"], "", "flags: pretrain.steps: Input should be greater than 0 (got '0')"),
        (["rl"], "[train.optim]\nlr = -1\n", "{file}: train.optim.lr: Input should be greater than 0 (got -1)"),
        (["rl", "--loop.stale-policy", "keep"], "", "flags: loop.stale_policy: Input should be 'drop' or 'regenerate' (got 'keep')"),
        (["rl"], '[train]\npublish_dtype = "int8"\n', "{file}: train.publish_dtype: Input should be 'float32' or 'bfloat16'"),
        (["eval", "--samples", "2", "--k", "4"], "", "flags: k_values: pass@k needs 1 <= k <= samples (2); got [4]"),
        (["rl"], "seed = 1\n[train]\nseed = 3\n", "{file}: train.seed (3) is not a setting of its own: it is the run's `seed`"),
    ],
    ids=["file", "flag", "nested", "choice", "literal", "model-check", "derived"],
)  # fmt: skip
def test_a_bad_value_names_the_key_and_the_constraint(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    toml: str,
    says: str,
) -> None:
    config_file = tmp_path / "bad.toml"
    config_file.write_text(toml)
    run_dir = tmp_path / "run"
    extra = ["--config", str(config_file)] if toml else []
    assert main([*argv, *extra, "--run-dir", str(run_dir)]) == 2
    assert _one_line_error(capsys).startswith("error: " + says.format(file=config_file))
    assert not run_dir.exists()


def test_a_missing_or_unreadable_config_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.toml"
    assert main(["stage1", "--config", str(missing)]) == 2
    assert f"config file {missing} does not exist" in _one_line_error(capsys)
    broken = tmp_path / "broken.toml"
    broken.write_text("[loop\nsteps = 3\n")
    assert main(["rl", "--config", str(broken)]) == 2
    assert f"{broken} is not valid TOML" in _one_line_error(capsys)


def _help(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    return out.getvalue()


def _listed_flags(help_text: str) -> list[str]:
    """The first option string of every entry of an argparse help text."""
    return re.findall(r"^  (--[\w.-]+)", help_text, flags=re.MULTILINE)


@pytest.mark.parametrize("command", ["stage1", "pretrain", "sft", "rl", "eval"])
def test_help_lists_every_knob_once(command: str) -> None:
    from composer_rl.cli.eval import EvalCommandConfig

    root: type[CommandConfig] = {"rl": RLConfig, "eval": EvalCommandConfig}.get(
        command, Stage1Config
    )
    shown = {
        "stage1": {"run_dir", "preset", "threads", "corpus", "copy_warmup", "pretrain"}
        | {"long_context", "sft"},
        "pretrain": {"run_dir", "preset", "threads", "corpus", "copy_warmup", "pretrain"}
        | {"long_context", "parallel"},
        "sft": {"run_dir", "preset", "threads", "sft"},
    }.get(command)
    expected = [k.flag for k in knobs(root) if shown is None or k.key.split(".")[0] in shown]
    listed = _listed_flags(_help(command))
    knob_flags = [f for f in listed if f in set(expected)]
    assert knob_flags == expected  # each knob once, in its section's order
    assert len(listed) == len(set(listed))  # no entry twice
    # The learning rate is a knob of each section that has one, with that section's default.
    if command == "stage1":
        text = " ".join(_help(command).split())
        for flag, default in (
            ("--pretrain.optim.lr X", "0.003"),
            ("--long-context.optim.lr X", "0.0003"),
            ("--sft.optim.lr X", "0.0025"),
            ("--copy-warmup.lr X", "0.001"),
        ):
            assert re.search(
                re.escape(flag) + r" [^()]*\(default " + re.escape(default) + ";", text
            )
    if command == "rl":
        assert "--train.optim.lr X" in _help(command) and "--train.seed" not in _help(command)


def test_one_default_per_knob_where_two_components_share_one() -> None:
    """The training service's optimizer defaults are RL's (it is RL's trainer), the loss
    scores tokens at the temperature they were sampled at, and the run's seed, threads and
    sandbox reach every component that uses them."""
    from composer_rl.rl.services.training import TrainingConfig

    assert TrainingConfig().optim == RLConfig().train.optim
    assert TrainingConfig().optim.lr == 1e-4
    assert TrainingConfig().checkpoint_every == RLConfig().train.checkpoint_every
    config = _resolved(
        "rl", ["--rollout.temperature", "0.7", "--seed", "5", "--threads", "2", "--sandbox", "x"]
    )
    assert isinstance(config, RLConfig)
    assert config.loss.temperature == config.train.rl.temperature == 0.7
    assert config.train.seed == config.rollout.seed == 5
    assert config.train.threads == 2 and config.rollout.backend == "x"
    assert config.train.reference
    # The phases keep their own learning rates, each one knob with one default.
    stage1 = Stage1Config()
    lrs = (stage1.pretrain.optim.lr, stage1.long_context.optim.lr, stage1.sft.optim.lr)
    assert lrs == (3e-3, 3e-4, 2.5e-3)
    keys = [k.key for k in knobs(RLConfig)]
    assert len(keys) == len(set(keys))
    assert not any(k in keys for k in RLConfig.derived)


def test_eval_reads_its_settings_and_the_plugin_sections_from_one_file(tmp_path: Path) -> None:
    config_file = tmp_path / "eval.toml"
    config_file.write_text(
        "samples = 4\nk_values = [1, 4]\n\n[runner]\nmax_turns = 3\n\n"
        '[plugins]\nblock = ["style"]\n\n[plugin_config.example_reward]\nbonus = 0.25\n'
    )
    config = _resolved("eval", ["--config", str(config_file), "--max-new-tokens", "16"])
    from composer_rl.cli.eval import EvalCommandConfig

    assert isinstance(config, EvalCommandConfig)
    assert config.samples == 4 and config.k_values == (1, 4)
    assert config.runner.max_turns == 3 and config.runner.max_new_tokens == 16
    assert config.runner.temperature == 0.8  # none: 0.8 for more than one sample a task
    seen = config.plugin_run_config()
    assert seen["plugins"]["block"] == ["style"] and seen["example_reward"] == {"bonus": 0.25}
    assert _resolved("eval", ["--samples", "1"]).runner.temperature == 0.0  # type: ignore[attr-defined]


def test_the_configs_that_were_dataclasses_are_validated() -> None:
    from composer_rl.agent.episode import RunnerConfig
    from composer_rl.agent.summarize import SummaryConfig
    from composer_rl.eval import EvalConfig
    from composer_rl.rl.sampler import LearnabilityConfig, UpsamplingConfig

    for build, says in (
        (lambda: RunnerConfig(max_turns=0), "max_turns"),
        (lambda: RunnerConfig(temperature=-1.0), "temperature"),
        (lambda: SummaryConfig(context_budget=100, summary_tokens=200), "summary_tokens"),
        (lambda: EvalConfig(samples=1, k_values=(4,)), "k_values"),
        (lambda: UpsamplingConfig(after_fraction=1.5), "after_fraction"),
        (lambda: LearnabilityConfig(floor=0.0), "floor"),
        (lambda: RunnerConfig.model_validate({"max_turn": 3}), "max_turn"),
    ):
        with pytest.raises(ValueError, match=says):
            build()


def test_every_section_of_every_command_has_a_description() -> None:
    from composer_rl.cli.eval import EvalCommandConfig

    for root in (RLConfig, Stage1Config, EvalCommandConfig):
        for section in sections(root):
            assert section.description, (root.__name__, section.key)


def test_a_derived_key_given_with_the_value_it_gets_anyway_loads(tmp_path: Path) -> None:
    """An RL run directory's config.toml written before `loss.temperature` followed
    `rollout.temperature` holds both; it still loads, while a disagreeing value is refused."""
    written = tmp_path / "config.toml"
    written.write_text("[rollout]\ntemperature = 0.9\n\n[loss]\ntemperature = 0.9\n")
    config = _resolved("rl", ["--config", str(written)])
    assert isinstance(config, RLConfig) and config.loss.temperature == 0.9
    written.write_text("[loss]\ntemperature = 0.9\n")
    with pytest.raises(ConfigError, match=r"loss\.temperature \(0\.9\) is not a setting"):
        _resolved("rl", ["--config", str(written)])


def test_model_overrides_shape_the_pretrained_model_and_a_bad_one_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`model_overrides` replaces fields of the preset: a real (tiny) pretrain phase builds
    and exports that shape; a field the model has not, or a value it refuses, stops the
    command with one line and exit status 2 before the run directory is written."""
    from _stage_helpers import tiny_config, write_corpus

    from composer_rl.stages.pretrain import run_pretrain

    corpus = write_corpus(tmp_path / "corpus.jsonl")
    config = tiny_config(tmp_path / "run", corpus)
    config["model_overrides"] = {"kv_lora_rank": 48, "qk_nope_head_dim": 24}
    config["pretrain"]["steps"] = 2  # type: ignore[index]
    run_pretrain(Stage1Config.model_validate(config), show_progress=False)
    exported = json.loads((tmp_path / "run" / "pretrain" / "final" / "config.json").read_text())
    assert exported["kv_lora_rank"] == 48 and exported["qk_nope_head_dim"] == 24
    # Values of every kind a TOML table holds: the plain attention of small models.
    mha = {"attention": "mha", "attention_bias": True, "attention_initializer_range": 0.05}
    config = {**config, "run_dir": str(tmp_path / "mha"), "model_overrides": mha}
    run_pretrain(Stage1Config.model_validate(config), show_progress=False)
    exported = json.loads((tmp_path / "mha" / "pretrain" / "final" / "config.json").read_text())
    assert exported["model_type"] == "composer_mha" and exported["attention_bias"] is True
    assert exported["composer"]["attention_initializer_range"] == 0.05
    for overrides, said in (
        ({"kv_lora_rankk": 48}, "kv_lora_rankk"),
        ({"kv_lora_rank": 0}, "greater than 0"),
        ({"attention": "gqa"}, "attention"),
        ({"attention": "mha", "parallel": {"cp": 2}}, "parallel.cp"),
    ):
        parallel = overrides.pop("parallel", {})
        bad = {**config, "run_dir": str(tmp_path / "bad"), "model_overrides": overrides}
        bad["parallel"] = parallel
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        assert main(["stage1", "--config", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err and "model_overrides" in err
        assert not (tmp_path / "bad").exists()


RECIPES = Path(__file__).parents[1] / "recipes"


def test_the_recipes_load_as_the_records_ran_them() -> None:
    """`recipes/` holds the settings the records chose on validation tasks, as files a
    command reads; a renamed or removed knob fails here, not two hours into a run."""
    from composer_rl.config import load

    stage1 = load(Stage1Config, RECIPES / "stage1-copying.toml")
    assert stage1.model_overrides == {"kv_lora_rank": 128, "q_lora_rank": 128,
                                      "qk_nope_head_dim": 64}  # fmt: skip
    assert (stage1.copy_warmup.steps, stage1.copy_warmup.pretrain_share) == (3000, 0.5)
    assert stage1.pretrain.steps == 2000 and stage1.sft.optim.lr == 4e-4
    assert (stage1.sft.invented_name_tasks, stage1.sft.invented_names) == (1500, "words")
    assert stage1.sft.optim.warmup_steps == Stage1Config().sft.optim.warmup_steps

    # The claim run's start: stage1-copying with plain attention, every other phase alike.
    mha = load(Stage1Config, RECIPES / "stage1-mha.toml")
    assert mha.model_overrides == {"attention": "mha", "qk_rope_head_dim": 32, "v_head_dim": 32,
                                   "attention_bias": True,
                                   "attention_initializer_range": 0.051}  # fmt: skip
    assert (mha.copy_warmup, mha.pretrain, mha.sft) == (
        stage1.copy_warmup,
        stage1.pretrain,
        stage1.sft,
    )

    rl = load_config(RECIPES / "rl-validation.toml", {})
    assert rl.rollout.temperature == 0.5 and rl.loss.temperature == 0.5
    assert rl.loop.learnability and rl.loop.constant_by == "correctness"
    assert rl.loop.steps == 20 and rl.eval.every == 0
    assert rl.rewards["length"]["charged"] == "solved"
