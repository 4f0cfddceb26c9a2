"""``composer-rl services check``: the command line of `composer_rl.rl.services.check`.

Parses the arguments (placement, model, store, timeouts), runs the check (which starts
the four services, drives one round through them and stops what it started) and prints
where each service ran and how long its part took.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from composer_rl.cli._ray_args import add_ray_address_argument
from composer_rl.errors import ConfigError

if TYPE_CHECKING:
    from composer_model import ModelConfig


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
    from composer_rl.rl.services import SERVICE_NAMES

    placement: dict[str, dict[str, float]] = {}
    for spec in specs:
        service, sep, resource = spec.partition("=")
        name, _, amount_text = resource.partition(":")
        if not sep or not name or service not in SERVICE_NAMES:
            raise ConfigError(
                f"--place {spec!r}: write SERVICE=RESOURCE[:AMOUNT] with SERVICE one "
                f"of {', '.join(SERVICE_NAMES)} (e.g. --place training=worker_node)"
            )
        try:
            amount = float(amount_text) if amount_text else 0.01
        except ValueError:
            raise ConfigError(f"--place {spec!r}: AMOUNT must be a number") from None
        if amount <= 0:
            raise ConfigError(f"--place {spec!r}: AMOUNT must be > 0")
        placement.setdefault(service, {})[name] = amount
    return placement


def resolve_model(spec: str) -> tuple[ModelConfig | Path, ModelConfig]:
    """What `start_services` takes for `spec`, and the architecture it describes."""
    from composer_model import PRESETS, ModelConfig, preset

    path = Path(spec)
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.is_file():
            raise ConfigError(f"--model {spec}: a directory needs a config.json")
        return path, ModelConfig.from_hf_dict(json.loads(config_file.read_text()))
    if path.is_file():
        config = ModelConfig.from_hf_dict(json.loads(path.read_text()))
        return config, config
    if spec in PRESETS:
        config = preset(spec)
        return config, config
    raise ConfigError(
        f"--model {spec!r} is neither a preset ({', '.join(sorted(PRESETS))}) nor an "
        "existing config.json file or checkpoint directory"
    )


def check_main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from composer_infra.runtime import ClusterAuthError
    from composer_rl.rl.services.check import run_check

    console = Console()
    for flag, value in (
        ("--threads", args.threads),
        ("--max-new-tokens", args.max_new_tokens),
        ("--timeout", args.timeout),
    ):
        if value <= 0:
            raise ConfigError(f"{flag} {value:g}: must be above 0")
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
    try:
        report = run_check(
            source,
            config,
            run_dir,
            address=args.ray_address,
            store_url=args.store_url,
            placement=placement,
            backend=args.backend,
            threads=args.threads,
            max_new_tokens=args.max_new_tokens,
            timeout_s=args.timeout,
        )
    except (ClusterAuthError, ConnectionError, ValueError) as error:
        console.print(f"[red]could not start the services:[/red] {error}")
        return 1
    finally:
        if temporary:
            shutil.rmtree(run_dir, ignore_errors=True)
    if "error" in report:
        console.print(f"[red]check failed:[/red] {report['error']}")

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
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"report: {args.report}")
    if report["ok"]:
        console.print("[green]services check passed[/green]")
        return 0
    return 1


def _placement_text(placement: Mapping[str, Mapping[str, float]]) -> str:
    return ", ".join(f"{s}->{','.join(r)}" for s, r in placement.items()) or "Ray's choice"
