"""Settings that can be checked without starting anything are refused first: one line that
says what to change, exit status 2, no service started."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer_model import ComposerTokenizer
from composer_rl.cli import main


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    from composer_model.tokenizer import train_tokenizer

    final = tmp_path / "stage1" / "sft" / "final"
    final.mkdir(parents=True)
    tokenizer: ComposerTokenizer = train_tokenizer(
        ["def f(x):\n    return x\n"] * 4, vocab_size=300
    )
    tokenizer.save(final / "tokenizer.json")
    return final


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--train.dp", "2", "--train.ep", "3"], "train.ep"),
        (["--train.dp", "2", "--local", "true"], "drop --local true"),
        (
            ["--train.dp", "8", "--loop.group-size", "2", "--loop.groups-per-step", "2"],
            "cannot feed",
        ),
        (["--loss.anchor-weight", "0.1"], "train.anchor_data"),
        (["--loop.steps", "-1"], "loop.steps"),
    ],
    ids=[
        "ep-not-dividing",
        "ranks-in-one-process",
        "step-too-small",
        "anchor-without-data",
        "bad-value",
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(
    checkpoint: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    says: str,
) -> None:
    run_dir = tmp_path / "run"
    code = main(["rl", "--model", str(checkpoint), "--run-dir", str(run_dir), *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: ") and says in err and "\n" not in err, err
    assert not run_dir.exists()  # nothing started, nothing written


def test_a_missing_model_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    assert main(["rl", "--model", str(missing), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--model {missing} does not exist" in err and "\n" not in err
    assert not (tmp_path / "run").exists()


def test_an_unknown_key_in_a_config_file_names_what_its_section_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "rl.toml"
    config.write_text("[loop]\nstepz = 3\n")
    assert main(["rl", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{config} + flags: unknown key 'loop.stepz'; loop accepts" in err and "steps" in err
    assert "pydantic" not in err and "http" not in err and "\n" not in err
