"""The docs say what the code does (issue 47): the manual's nats.conf passes `nats-server -t` as pasted, the
manual's `ce-bench relay` synopsis names each flag with the CLI's own default, and the README's command table
brackets only what is optional."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import click

import cebench.cli  # noqa: F401  (registers relay and up on main)
from host_runner.cli import main  # with every command (cebench.cli adds relay and up to it)
from tests.nats_process import NATS_SERVER

ROOT = Path(__file__).resolve().parents[1]


def blocks(path: Path, first_line: str) -> list[str]:
    text = path.read_text()
    return [b for b in re.findall(r"```[a-z]*\n(.*?)```", text, re.S) if b.startswith(first_line)]


def test_the_manuals_nats_conf_passes_nats_server_t_as_pasted(tmp_path: Path) -> None:
    found = blocks(ROOT / "docs" / "manual.md", "# nats.conf")
    assert len(found) == 1, "the manual holds one whole nats.conf"
    conf = tmp_path / "nats.conf"
    conf.write_text(found[0].replace("/var/lib/nats", str(tmp_path / "js")))  # a store this test may create
    result = subprocess.run([NATS_SERVER, "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "..." not in found[0]
    assert not blocks(ROOT / "README.md", "# nats.conf"), "the README points to the manual's whole config"


def params(command: str) -> dict[str, click.Parameter]:
    cmd = main.commands[command]
    return {opt: p for p in cmd.params for opt in getattr(p, "opts", [])}


def shown_default(p: click.Parameter) -> Any:
    default = p.default
    return default if not isinstance(default, bool) else None


def test_the_manuals_relay_synopsis_names_the_clis_defaults() -> None:
    synopsis = next(b for b in blocks(ROOT / "docs" / "manual.md", "ce-bench relay ["))
    flags = re.findall(r"\[(--[a-z0-9-]+) ([0-9][0-9.]*)\]", synopsis)
    assert len(flags) >= 15, synopsis  # the precondition: the synopsis was read
    relay = params("relay")
    for flag, value in flags:
        assert flag in relay, f"{flag}: no such option of `ce-bench relay`"
        default = shown_default(relay[flag])
        try:
            same = float(value) == float(default)
        except (TypeError, ValueError):
            same = value == str(default)
        assert same, f"{flag}: the manual says {value}, the CLI's default is {default}"
    named = set(re.findall(r"(--[a-z0-9-]+)", synopsis))
    unknown = {f for f in named if f not in relay and f not in params("up")}
    assert not unknown, f"the synopsis names options the CLI does not have: {sorted(unknown)}"


def test_the_readmes_commands_bracket_only_optional_options() -> None:
    table = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `ce-bench ")]
    assert len(table) >= 6, "the precondition: the README's command table was read"
    checked = 0
    for line in table:
        usage = line.split("`")[1].split()
        name = usage[1]
        if name not in main.commands or not isinstance(main.commands[name], click.Command):
            continue
        cmd = main.commands[name]
        if isinstance(cmd, click.Group):
            cmd = cmd.commands[usage[2]]
        opts = {opt: p for p in cmd.params for opt in getattr(p, "opts", [])}
        optional = set(re.findall(r"\[(--[a-z0-9-]+)", line.split("`")[1]))
        named = re.findall(r"(--[a-z0-9-]+)", line.split("`")[1])
        for flag in named:
            assert flag in opts, f"{line.split('`')[1]}: {flag} is not an option"
            assert not (flag in optional and opts[flag].required), f"{line.split('`')[1]}: {flag} is required"
            checked += 1
        for p in cmd.params:
            if isinstance(p, click.Option) and p.required and p.envvar is None:
                assert set(p.opts) & set(named), f"{line.split('`')[1]}: the required {p.opts[0]} is not shown"
    assert checked >= 5, checked


def test_the_grafana_dashboard_graphs_what_the_relay_exports(tmp_path: Path) -> None:
    """docs/grafana-dashboard.json: every metric a panel queries is on a real relay's /metrics, and the
    scoreboard gauges say -1 (unknown) before a roll call finished, never a made-up 0."""
    import json
    import urllib.request

    from tests.relay_process import RelayProcess

    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    queried = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"ce_relay_[a-z0-9_]+",
                                                                                        t["expr"])}
    assert len(queried) >= 8, queried
    with RelayProcess(tmp_path / "relay") as relay:
        text = urllib.request.urlopen(relay.url + "/metrics", timeout=10).read().decode()
    exported = {line.split("{")[0].split()[0] for line in text.splitlines() if line and not line.startswith("#")}
    exported |= {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert queried <= exported, sorted(queried - exported)
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith("ce_relay_verified_") or line.startswith("ce_relay_roll_call_answered_ratio")}
    assert values and set(values.values()) == {-1.0}, values


def test_the_deploy_files_name_real_options_and_a_valid_nats_config(tmp_path: Path) -> None:
    """deploy/: the compose file's and the systemd units' `ce-bench` commands use options the CLI has, the
    NATS config is web/cluster/nats_auth.py's own (passwords from the environment) and passes nats-server -t."""
    import os

    import yaml

    from web.cluster.nats_auth import server_config

    deploy = ROOT / "deploy"
    compose = yaml.safe_load((deploy / "compose.yaml").read_text())
    commands = [compose["services"][s]["command"] for s in ("relay-a", "relay-b")]
    for unit in ("ce-bench-relay.service", "ce-bench-node.service"):
        line = next(x for x in (deploy / unit).read_text().splitlines() if x.startswith("ExecStart="))
        commands.append(line.split()[1:])
    for args in commands:
        cmd = main.commands[args[0]]
        known = {opt for p in cmd.params for opt in getattr(p, "opts", [])}
        flags = [a for a in args if a.startswith("--")]
        assert flags and set(flags) <= known, (args, set(flags) - known)
    conf = (deploy / "nats.conf").read_text()
    ours = server_config({"relay-a": "@A@", "relay-b": "@B@"}, "0.0.0.0:4222", Path("/data"), "ce-atlas")
    assert conf.split("listen:", 1)[1] == ours.split("listen:", 1)[1].replace('"@A@"', "$RELAY_A_PASSWORD").replace(
        '"@B@"', "$RELAY_B_PASSWORD")
    result = subprocess.run([NATS_SERVER, "-t", "-c", str(deploy / "nats.conf")], capture_output=True, text=True,
                            timeout=30, env={**os.environ, "RELAY_A_PASSWORD": "a" * 32, "RELAY_B_PASSWORD": "b" * 32})
    assert result.returncode == 0, result.stdout + result.stderr
    manual_unit = next(b for b in blocks(ROOT / "docs" / "manual.md", "# /etc/systemd/system/ce-bench-node.service"))
    assert manual_unit == (deploy / "ce-bench-node.service").read_text()
