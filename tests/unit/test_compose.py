"""docker-compose.yml and deploy/prometheus.yml: every `pgq` command in them is one the real
CLI accepts (parsed by the typer app itself), and the pieces point at each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from pgqueue.cli import app

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def parse(argv: list[str]) -> tuple[Any, dict[str, Any]]:
    """Resolve ``pgq ...`` to its command and parse the arguments as the CLI would (typer's
    own click: raises its UsageError for unknown commands, options and bad values)."""
    assert argv[0] == "pgq", argv
    command: Any = typer.main.get_command(app)
    args = argv[1:]
    while hasattr(command, "list_commands"):  # a group: descend into the subcommand
        name, *args = args
        assert name in command.list_commands(None), f"pgq has no command {name!r}: {argv}"
        command = command.commands[name]
    context = command.make_context(argv[0], list(args))
    return command, context.params


def commands() -> dict[str, list[str]]:
    return {name: s["command"] for name, s in compose()["services"].items() if "command" in s}


def test_every_pgq_command_in_the_compose_file_is_a_real_cli_command():
    found = commands()
    assert set(found) == {"migrate", "worker", "reaper", "dashboard"}
    for argv in found.values():
        parse(argv)


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["pgq", "work", "app:pgq", "--no-such-flag"], "No such option"),
        (["pgq", "wrok", "app:pgq"], "no command 'wrok'"),
        (["pgq", "reaper", "--interval", "soon"], "duration"),
        (["pgq", "jobs", "list", "--limit", "x"], "valid integer"),
    ],
)
def test_the_check_catches_commands_the_cli_does_not_have(argv, error):
    with pytest.raises(Exception, match=error):
        parse(argv)


def test_services_are_wired_together():
    services = compose()["services"]
    assert "healthcheck" in services["postgres"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["migrate"]["restart"] == "no"  # one-shot
    for name in ("worker", "reaper", "dashboard"):
        condition = services[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully"
    assert services["worker"]["deploy"]["replicas"] >= 2
    _, work = parse(services["worker"]["command"])
    # The reaper runs as its own service; workers drain within the stop grace period.
    assert work["reaper"] is False
    assert int(services["worker"]["stop_grace_period"].rstrip("s")) > work["shutdown_grace"]
    # The dashboard is reachable from outside the container, so it must have auth.
    _, board = parse(services["dashboard"]["command"])
    assert board["host"] == "0.0.0.0"
    assert "PGQUEUE_DASHBOARD_TOKEN" in services["dashboard"]["environment"]
    assert f"{board['port']}:{board['port']}" in services["dashboard"]["ports"]
    # Prometheus scrapes every worker replica on the port they serve metrics on.
    mount = services["prometheus"]["volumes"][0].split(":")[0]
    prometheus = yaml.safe_load((ROOT / mount).read_text())
    [job] = prometheus["scrape_configs"]
    [dns] = job["dns_sd_configs"]
    assert dns["names"] == ["worker"] and dns["port"] == work["metrics_port"]
    assert (ROOT / "Dockerfile").exists()
