"""`ce-bench nodes` and `ce-bench roll-calls`: a relay's nodes and its latest roll calls, one line each, read from
its public API (/atlas and /v1/roll-calls). Formatting is pure (`node_lines`, `roll_call_lines`), so it is
testable directly; `--json` prints what the relay said."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from common.errors import UserError
from host_runner.relay_client import RelayError
from host_runner.status import _get, printable

RELAY = click.option("--relay", metavar="URL", required=True, envvar="CE_RELAY", show_envvar=True,
                     help="the relay to read")


def _num(value: Any, digits: int = 1) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:,.{digits}f}"


def node_lines(page: dict[str, Any]) -> list[str]:
    """One line per node of an /atlas page: id, trust status, claimed figures (claimed: measured by the node;
    what roll calls proved is on `ce-bench status NODE_ID`), and when it was measured (UTC)."""
    lines = [f"{'node':14}{'status':12}{'cores':>6}{'GFLOP/s':>10}{'tokens/s':>10}{'GPUs':>5}  {'measured (UTC)':16}"
             "  name"]
    for p in page.get("nodes") or []:
        cpu, llm = p.get("cpu") or {}, p.get("llm") or {}
        at = p.get("measured_at")
        status = str((page.get("trust") or {}).get(p.get("node_id"), "-"))
        lines.append(f"{'…' + str(p.get('node_id', ''))[-12:]:14}{status:12}"
                     f"{_num(cpu.get('cores'), 0):>6}{_num(cpu.get('gflops_fp32')):>10}"
                     f"{_num(llm.get('tokens_per_sec')):>10}{len(p.get('gpus') or []):>5}  "
                     f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(at)) if isinstance(at, int) else '-':16}"
                     f"  {printable(p.get('name'))}".rstrip())
    return lines


def roll_call_lines(body: dict[str, Any]) -> list[str]:
    """One line per roll call: id, moment (UTC), SGEMM answered / challenged, the reference model's, failure
    codes, and what it proved (capped at the claims)."""
    lines = [f"{'roll call':18}{'at (UTC)':21}{'answered':>10}{'llm':>8}{'GFLOP/s':>10}{'tokens/s':>10}{'GPUs':>5}"
             "  failures"]
    for c in body.get("roll_calls") or []:
        proven, llm = c.get("proven") or {}, c.get("llm") or {}
        at = c.get("at")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) if isinstance(at, int | float) else "-"
        lines.append(f"{str(c.get('id', ''))[:17]:18}{when:21}"
                     f"{str(c.get('answered', 0)) + '/' + str(c.get('sessions_challenged', 0)):>10}"
                     f"{str(llm.get('answered', 0)) + '/' + str(llm.get('challenged', 0)):>8}"
                     f"{_num(proven.get('cpu_gflops')):>10}{_num(proven.get('tokens_per_sec')):>10}"
                     f"{_num(proven.get('gpus'), 0):>5}  {', '.join(c.get('failure_codes') or []) or '-'}")
    return lines


def _read(relay: str, path: str) -> dict[str, Any]:
    try:
        return _get(relay, path)
    except RelayError as exc:
        raise UserError(str(exc)) from None


@click.command("nodes")
@RELAY
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="nodes per page")
@click.option("--all", "every", is_flag=True, help="every page, not only the first")
@click.option("--json", "as_json", is_flag=True, help="print the relay's /atlas pages as JSON lines")
def nodes(relay: str, limit: int, every: bool, as_json: bool) -> None:
    """The relay's nodes: trust status and claimed figures, one line each."""
    cursor, first = "", True
    while first or (every and cursor):
        page = _read(relay, f"/atlas?limit={limit}" + (f"&cursor={cursor}" if cursor else ""))
        click.echo(json.dumps(page) if as_json else "\n".join(node_lines(page)[0 if first else 1:]))
        cursor, first = str(page.get("next_cursor") or ""), False
    if not as_json and cursor and not every:
        click.echo(f"(more: --all, or --limit above {limit})")


@click.command("roll-calls")
@RELAY
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the relay's /v1/roll-calls answer")
def roll_calls(relay: str, limit: int, as_json: bool) -> None:
    """The relay's latest roll calls: who answered, what failed, what was proven."""
    body = _read(relay, f"/v1/roll-calls?limit={limit}")
    click.echo(json.dumps(body) if as_json else "\n".join(roll_call_lines(body)))
