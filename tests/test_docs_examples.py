"""The docs say what the code does (issue 47): the manual's nats.conf passes `nats-server -t` as pasted, the
manual's `ce-bench relay` synopsis names each flag with the CLI's own default, and the README's command table
brackets only what is optional."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import click

from cebench.cli import main
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
