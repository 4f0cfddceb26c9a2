"""``composer-rl services check``: one real round through the four services on Ray.

It answers "does the service layer work here, and where does each service run?" before
a long run is launched on a machine or a cluster: it starts training, inference,
environment and evaluation actors (a local Ray instance, or the cluster named by
``--ray-address``), drives one round through them and prints where each ran and how
long its part took. What it started, it stops; a cluster it joined keeps running.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from composer_rl.cli._ray_args import add_ray_address_argument

if TYPE_CHECKING:
    from composer_model import ModelConfig
    from composer_rl.services import Services

T = TypeVar("T")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "services", help="the training, inference, environment and evaluation services on Ray"
    )
    commands = parser.add_subparsers(dest="services_command", metavar="SUBCOMMAND")
    check = commands.add_parser(
        "check",
        help="start the four services, drive one round through them, report where they ran",
        description=(
            "Start the four services (a local Ray instance, or the cluster given by "
            "--ray-address), run one round: a train step publishes a new policy version, "
            "inference loads it and generates tokens stamped with it, the environment "
            "service runs a built-in task's tests in a sandbox, evaluation scores the new "
            "version. Prints the node each service ran on and its timings; exits 1 if any "
            "part fails. Stops what it started; never stops a cluster it joined."
        ),
    )
    add_ray_address_argument(check)
    check.add_argument(
        "--run-dir",
        type=Path,
        help="weights and checkpoints go here (default: a temporary directory, removed "
        "afterwards); on a multi-machine cluster use a shared path or --store-url",
    )
    check.add_argument("--store-url", help="weight store URL (default: file:// under --run-dir)")
    check.add_argument(
        "--model",
        default="tiny",
        help="a model preset name, an HF-style config.json (fresh weights), or a "
        "save_pretrained directory (default: tiny)",
    )
    check.add_argument(
        "--place",
        action="append",
        default=[],
        metavar="SERVICE=RESOURCE[:AMOUNT]",
        help="run SERVICE (training, inference, environment, evaluation) on a node that "
        "advertises the Ray custom resource RESOURCE (ray start --resources), holding "
        "AMOUNT of it (default 0.01); repeatable",
    )
    check.add_argument("--backend", help="sandbox backend of the environment service (bwrap)")
    check.add_argument("--threads", type=int, default=1, help="torch threads per service")
    check.add_argument("--max-new-tokens", type=int, default=8)
    check.add_argument(
        "--timeout", type=float, default=600.0, help="seconds each step may take (default 600)"
    )
    check.add_argument("--report", type=Path, help="also write the results as JSON here")
    check.set_defaults(handler=check_main)
    parser.set_defaults(handler=lambda _args: _no_subcommand(parser))


def _no_subcommand(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def parse_placement(specs: list[str]) -> dict[str, dict[str, float]]:
    """``["training=trainer_node", "inference=gpu:0.5"]`` -> `start_services` placement."""
    from composer_rl.services import SERVICE_NAMES

    placement: dict[str, dict[str, float]] = {}
    for spec in specs:
        service, sep, resource = spec.partition("=")
        name, _, amount_text = resource.partition(":")
        if not sep or not name or service not in SERVICE_NAMES:
            raise SystemExit(
                f"error: --place {spec!r}: write SERVICE=RESOURCE[:AMOUNT] with SERVICE one "
                f"of {', '.join(SERVICE_NAMES)} (e.g. --place training=worker_node)"
            )
        try:
            amount = float(amount_text) if amount_text else 0.01
        except ValueError:
            raise SystemExit(f"error: --place {spec!r}: AMOUNT must be a number") from None
        if amount <= 0:
            raise SystemExit(f"error: --place {spec!r}: AMOUNT must be > 0")
        placement.setdefault(service, {})[name] = amount
    return placement


def resolve_model(spec: str) -> tuple[ModelConfig | Path, ModelConfig]:
    """What `start_services` takes for `spec`, and the architecture it describes."""
    from composer_model import PRESETS, ModelConfig, preset

    path = Path(spec)
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.is_file():
            raise SystemExit(f"error: --model {spec}: a directory needs a config.json")
        return path, ModelConfig.from_hf_dict(json.loads(config_file.read_text()))
    if path.is_file():
        config = ModelConfig.from_hf_dict(json.loads(path.read_text()))
        return config, config
    if spec in PRESETS:
        config = preset(spec)
        return config, config
    raise SystemExit(
        f"error: --model {spec!r} is neither a preset ({', '.join(sorted(PRESETS))}) nor an "
        "existing config.json file or checkpoint directory"
    )


def _token_rows(vocab_size: int, rows: int, length: int, offset: int) -> list[list[int]]:
    """Learnable repeating patterns of ids 2..vocab-1 (0 and 1 are often special tokens)."""
    span = vocab_size - 2
    return [
        [2 + (offset + r * 7 + (i % (r + 2)) * 13) % span for i in range(length)]
        for r in range(rows)
    ]


class CheckFailed(RuntimeError):
    """One part of the round did not do what it must."""


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def run_round(
    services: Services,
    config: ModelConfig,
    results: dict[str, dict[str, Any]],
    *,
    max_new_tokens: int,
    timeout_s: float,
) -> None:
    """Train one step, follow it with inference and evaluation, grade a task.

    Fills `results` by actor name as each part succeeds (so a failure keeps the parts
    before it); raises `CheckFailed` when a part did not do what it must.
    """
    import ray

    from composer_infra.sandbox import Task as SandboxTask
    from composer_rl.tasks import BuiltinTaskSource, Split

    def get(ref: Any) -> Any:
        return ray.get(ref, timeout=timeout_s)

    vocab = config.vocab_size
    start_version = int(get(services.training.version.remote()))

    step, seconds = _timed(
        lambda: get(services.training.train_step.remote(_token_rows(vocab, 4, 24, 0), wait=True))
    )
    version = int(step["version"])
    if version != start_version + 1:
        raise CheckFailed(f"training: step published version {version}, not {start_version + 1}")
    results["training"] = {
        "seconds": seconds,
        "version": version,
        "loss": step["loss"],
        "summary": f"step {step['step']}: loss {step['loss']:.3f}, published v{version}",
    }

    prompts = [row[:4] for row in _token_rows(vocab, 2, 4, 5)]
    for i, actor in enumerate(services.inference):

        def sync_and_generate(actor: Any = actor) -> tuple[int | None, list[Any]]:
            held = get(actor.sync.remote())
            return held, get(actor.generate.remote(prompts, max_new_tokens=max_new_tokens, seed=0))

        (held, generated), seconds = _timed(sync_and_generate)
        stamps = sorted({v for g in generated for v in g.versions})
        tokens = sum(len(g.token_ids) for g in generated)
        if held != version or not tokens or stamps != [version]:
            raise CheckFailed(
                f"inference-{i}: synced to {held}, generated {tokens} tokens stamped with "
                f"versions {stamps}; expected v{version} on every token"
            )
        results[f"inference-{i}"] = {
            "seconds": seconds,
            "version": version,
            "tokens": tokens,
            "summary": f"synced to v{held}, {tokens} tokens, all stamped v{version}",
        }

    task = next(iter(BuiltinTaskSource().tasks(Split.TRAIN)))
    spec = SandboxTask(
        task_id=task.id,
        instruction=task.instruction,
        files={**task.solved_files(), **task.tests},
        test_command=task.test_command,
    )

    def grade() -> Any:
        sandbox_id = get(services.environment.open.remote(spec))
        try:
            return get(services.environment.run_tests.remote(sandbox_id))
        finally:
            get(services.environment.close.remote(sandbox_id))

    report, seconds = _timed(grade)
    if not report.all_passed:
        raise CheckFailed(
            f"environment: the oracle solution of task {task.id} did not pass its tests in the "
            f"sandbox ({report.passed} passed, {report.failed} failed, {report.errors} errors, "
            f"exit {report.exit_code}):\n{report.output[-2000:]}"
        )
    results["environment"] = {
        "seconds": seconds,
        "task": task.id,
        "passed": report.passed,
        "summary": f"task {task.id}: {report.passed} passed, 0 failed in a sandbox",
    }

    scored, seconds = _timed(
        lambda: get(services.evaluation.evaluate.remote(_token_rows(vocab, 2, 24, 11)))
    )
    if scored["version"] != version:
        raise CheckFailed(f"evaluation: scored v{scored['version']}, not the newest v{version}")
    results["evaluation"] = {
        "seconds": seconds,
        "version": version,
        "loss": scored["loss"],
        "summary": f"v{scored['version']}: held-out loss {scored['loss']:.3f}",
    }


def check_main(args: argparse.Namespace) -> int:
    import ray
    from rich.console import Console
    from rich.table import Table

    from composer_infra.environment import EnvironmentConfig
    from composer_infra.runtime import ClusterAuthError
    from composer_rl.services import TrainingConfig, start_services

    console = Console()
    placement = parse_placement(args.place)
    source, config = resolve_model(args.model)
    temporary = args.run_dir is None
    run_dir = (
        Path(tempfile.mkdtemp(prefix="composer-services-check-")) if temporary else args.run_dir
    )
    where = f"joining {args.ray_address}" if args.ray_address else "on a local Ray instance"
    console.print(
        f"starting the services {where} (run dir {run_dir}; placement: "
        f"{_placement_text(placement)})"
    )
    report: dict[str, Any] = {"address": args.ray_address, "run_dir": str(run_dir)}
    results: dict[str, dict[str, Any]] = {}
    code = 0
    try:
        try:
            services, start_s = _timed(
                lambda: start_services(
                    source,
                    run_dir,
                    address=args.ray_address,
                    store_url=args.store_url,
                    training=TrainingConfig(threads=args.threads, checkpoint_every=0),
                    environment=EnvironmentConfig(
                        backend=args.backend, warm_sandboxes=0, work_dir=run_dir / "sandboxes"
                    ),
                    threads=args.threads,
                    placement=placement,
                )
            )
        except (ClusterAuthError, ConnectionError, ValueError) as error:
            console.print(f"[red]could not start the services:[/red] {error}")
            return 1
        try:
            nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
            located = services.locations(timeout_s=args.timeout)
            report.update(start_seconds=start_s, nodes=nodes)
            try:
                run_round(
                    services,
                    config,
                    results,
                    max_new_tokens=args.max_new_tokens,
                    timeout_s=args.timeout,
                )
            except Exception as failure:  # a failed part is the check's answer, not a crash
                code = 1
                report["error"] = f"{type(failure).__name__}: {failure}"
                console.print(f"[red]check failed:[/red] {report['error']}")
            report["services"] = {
                name: {**place, **results.get(name, {})} for name, place in located.items()
            }
        finally:
            services.stop(timeout_s=args.timeout)
    finally:
        if temporary:
            shutil.rmtree(run_dir, ignore_errors=True)

    used = {s["node_id"] for s in report["services"].values()}
    table = Table(title=f"services: {len(used)} of {len(report['nodes'])} Ray node(s) used")
    for column in ("service", "node", "host (ip)", "pid", "seconds", "result"):
        table.add_column(column, justify="right" if column in ("pid", "seconds") else "left")
    for name, row in report["services"].items():
        table.add_row(
            name,
            row["node_id"][:12],
            f"{row['host']} ({row['node_ip']})",
            str(row["pid"]),
            f"{row['seconds']:.2f}" if "seconds" in row else "-",
            row.get("summary", "-"),
        )
    console.print(table)
    console.print(
        f"{len(report['nodes'])} node(s) alive; services started in {report['start_seconds']:.1f}s "
        + ("(joined cluster left running)" if args.ray_address else "(local Ray stopped)")
    )
    report["ok"] = code == 0
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"report: {args.report}")
    if code == 0:
        console.print("[green]services check passed[/green]")
    return code


def _placement_text(placement: Mapping[str, Mapping[str, float]]) -> str:
    return ", ".join(f"{s}->{','.join(r)}" for s, r in placement.items()) or "Ray's choice"
