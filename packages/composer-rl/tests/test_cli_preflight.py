"""Settings that can be checked without starting anything are refused first: one line that
says what to change, exit status 2, no service started."""

from __future__ import annotations

import subprocess
import sys
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
        (["--train.dp", "2", "--train.ep", "3"], "train.parallel.ep: ep=3 must divide"),
        (["--train.dp", "2", "--local", "true"], "drop --local true"),
        (
            ["--train.dp", "8", "--loop.group-size", "2", "--loop.groups-per-step", "2"],
            "cannot feed",
        ),
        (["--loss.anchor-weight", "0.1"], "train.anchor_data"),
        (["--loop.steps", "-1"], "loop.steps"),
        (["--tasks.source", "/nowhere/tasks"], "--tasks.source /nowhere/tasks does not exist"),
    ],
    ids=[
        "ep-not-dividing",
        "ranks-in-one-process",
        "step-too-small",
        "anchor-without-data",
        "bad-value",
        "missing-task-source",
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
    assert f"{config}: unknown key 'loop.stepz' (did you mean loop.steps?); loop accepts" in err
    assert "pydantic" not in err and "http" not in err and "\n" not in err


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's stderr, asserted to be one `error: ...` line (no traceback)."""
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.slow  # a fresh interpreter (about 10 s)
def test_rl_with_ep_not_dividing_dp_through_the_command_starts_nothing(tmp_path: Path) -> None:
    """`composer-rl rl --dp 2 --ep 3`, exactly as a new user types it (no --model: the check
    of the dimensions comes before the default checkpoint's): exit 2, one line, no Ray."""
    run_dir = tmp_path / "run"
    script = (
        "import sys, ray\n"
        "from composer_rl.cli import main\n"
        f"code = main(['rl', '--dp', '2', '--ep', '3', '--run-dir', {str(run_dir)!r}])\n"
        "print('ray initialized:', ray.is_initialized())\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert err.startswith("error: train.parallel.ep: ep=3 must divide") and "\n" not in err, err
    assert "ray initialized: False" in done.stdout
    assert not run_dir.exists() and list(tmp_path.iterdir()) == []


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    for i in range(30):
        (root / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n")
    return root


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--dp", "2", "--cp", "2", "--ep", "4", "--skip-long-context"], "torch.distributed.run"),
        (["--dp", "2", "--cp", "2", "--ep", "4"], "add --skip-long-context"),
        (["--dp", "2", "--ep", "3", "--skip-long-context"], "parallel.ep: ep=3 must divide"),
        (["--preset", "nosuch"], "preset 'nosuch': choose one of"),
        (["--threads", "0"], "flags: threads: Input should be greater than 0"),
        (["--pretrain.steps", "0"], "flags: pretrain.steps: Input should be greater than 0"),
    ],
    ids=["no-torchrun", "parallel-long-context", "ep-not-dividing", "preset", "threads", "steps"],
)
def test_pretrain_checks_the_launch_before_the_corpus(
    tmp_path: Path,
    corpus: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    says: str,
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    run_dir = tmp_path / "stage1"
    code = main(["pretrain", "--run-dir", str(run_dir), "--corpus", str(corpus), *flags])
    assert code == 2
    assert says in _one_line_error(capsys)
    assert not run_dir.exists()  # the corpus was not tokenized, nothing was written


NO_CUDA = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="asks for a GPU this machine lacks"
)


@pytest.mark.parametrize(
    ("command", "flags", "says"),
    [
        pytest.param(
            "stage1",
            ["--device", "cuda"],
            'device cuda: torch sees no CUDA device on this machine; give device = "cpu"',
            marks=NO_CUDA,
        ),
        pytest.param(
            "sft", ["--device", "cuda:0"], "device cuda:0: torch sees no CUDA", marks=NO_CUDA
        ),
        ("pretrain", ["--device", "tpu"], "'tpu' is not a device stage one trains on"),
        ("sft-round2", ["--device", "cuda:x"], "give cpu, cuda or cuda:N"),
        (
            "pretrain",
            ["--device", "cuda", "--dp", "2", "--skip-long-context"],
            "stage one's parallel phases run on CPU (gloo) only",
        ),
    ],
    ids=["stage1-no-gpu", "sft-no-gpu", "unknown-kind", "bad-index", "gpu-with-dp"],
)
def test_a_device_torch_cannot_train_on_is_refused_before_anything_is_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    flags: list[str],
    says: str,
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")  # a torchrun launch, so --dp 2 passes its own check
    run_dir = tmp_path / "stage1"
    assert main([command, "--run-dir", str(run_dir), *flags]) == 2
    assert says in _one_line_error(capsys)
    assert not run_dir.exists()


def test_a_missing_corpus_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "stage1"
    missing = tmp_path / "nowhere"
    assert main(["stage1", "--run-dir", str(run_dir), "--corpus", str(missing)]) == 2
    assert f"corpus.path {missing} does not exist" in _one_line_error(capsys)
    assert not run_dir.exists()


@pytest.mark.parametrize("command", ["stage1", "pretrain", "sft"])
def test_an_unknown_key_in_a_stage_config_names_what_its_section_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    config = tmp_path / "stage1.json"
    config.write_text('{"pretrain": {"stepz": 3}}')
    run_dir = tmp_path / "stage1"
    assert main([command, "--run-dir", str(run_dir), "--config", str(config)]) == 2
    err = _one_line_error(capsys)
    assert f"{config}: unknown key 'pretrain.stepz' (did you mean pretrain.steps?); " in err
    assert "; pretrain accepts " in err, err
    assert "steps" in err and "pydantic" not in err and "http" not in err
    assert not run_dir.exists()


def test_a_stage_config_file_changes_only_what_it_names(tmp_path: Path) -> None:
    """A section in the file is merged into that section's defaults: the phase's name and
    its other settings need not be repeated (they were required before)."""
    from composer_rl.stages.config import Stage1Config, load_stage1_config

    config = tmp_path / "stage1.json"
    config.write_text('{"pretrain": {"steps": 30}, "sft": {"optim": {"lr": 0.001}}}')
    loaded = load_stage1_config(config)
    defaults = Stage1Config()
    assert loaded.pretrain.steps == 30 and loaded.pretrain.name == "pretrain"
    assert loaded.pretrain.seq_len == defaults.pretrain.seq_len
    assert loaded.sft.optim.lr == 0.001 and loaded.sft.optim.warmup_steps == 5
    assert loaded.sft.steps == defaults.sft.steps


def test_sft_without_the_earlier_phases_names_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "stage1"
    assert main(["sft", "--run-dir", str(run_dir)]) == 2
    err = _one_line_error(capsys)
    assert "long_context/final does not exist" in err and "composer-rl pretrain" in err
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["eval", "--checkpoint", "{missing}"], "--checkpoint {missing} does not exist"),
        (["eval", "--compare", "{missing}", "{missing}"], "--compare {missing} does not exist"),
        (["study", "nvfp4-invariance", "--checkpoint", "{missing}"], "--checkpoint {missing}"),
        (["services", "check", "--model", "{missing}"], "is neither a preset"),
        (
            ["eval", "--checkpoint", "{checkpoint}", "--samples", "0"],
            "flags: samples: Input should be greater than or equal to 1 (got '0')",
        ),
        (["eval", "--checkpoint", "{checkpoint}", "--tasks", "{missing}"], "--tasks {missing}"),
        (["services", "check", "--place", "bogus"], "--place 'bogus'"),
        (["tasks", "export", "{missing}", "--per-template", "-1"], "--per-template -1"),
        (["services", "check", "--threads", "0"], "--threads 0: must be above 0"),
        (["tasks", "export", "{checkpoint}/tokenizer.json"], "tokenizer.json is a file"),
        (["tasks", "export", "{checkpoint}/tokenizer.json/out.jsonl"], "cannot be made under"),
        (["view", "{missing}", "--port", "99999"], "--port 99999: give 0 to 65535"),
    ],
    ids=[
        "eval",
        "eval-compare",
        "study",
        "services",
        "samples",
        "tasks",
        "place",
        "export",
        "services-threads",
        "export-to-a-file",
        "export-under-a-file",
        "view-port",
    ],
)
def test_a_wrong_path_or_value_on_other_commands_is_one_line(
    tmp_path: Path,
    checkpoint: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    says: str,
) -> None:
    missing = tmp_path / "nowhere"
    fill = {"missing": missing, "checkpoint": checkpoint}
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main([a.format(**fill) for a in argv]) == 2
    assert says.format(**fill) in _one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_export_to_a_jsonl_name_that_is_a_directory_is_refused_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "tasks.jsonl"
    taken.mkdir()
    assert main(["tasks", "export", str(taken)]) == 2
    assert f"{taken} is a directory" in _one_line_error(capsys)
    assert list(taken.iterdir()) == []
