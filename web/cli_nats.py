"""`ce-bench nats-configs`: the nats-server configs of a cluster of regions, with authorization on every server
(web/cluster/region_servers.py), and one password file per relay user and per region's leaf connection."""

from __future__ import annotations

import secrets
from pathlib import Path

import click

from common.errors import UserError
from common.files import write_atomic
from web.cluster.region_servers import hub_config, leaf_user, region_config
from web.cluster.regions import check_region
from web.config import RelayConfig


def _secret_file(path: Path, text: str) -> None:
    write_atomic(path, text.encode(), 0o600)  # a fresh file each time: an older one's mode does not carry over


def parse_regions(specs: tuple[str, ...]) -> dict[str, list[str]]:
    """REGION:USER[,USER...] options -> region -> relay users; a UserError saying what was expected."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        region, _, users = spec.partition(":")
        names = [u for u in users.split(",") if u]
        try:
            check_region(region)
        except ValueError as exc:
            raise UserError(f"--region {spec}: {exc}") from None
        if not names or region in out:
            raise UserError(f"--region {spec}: expected REGION:USER[,USER...] once per region (a relay user each)")
        out[region] = names
    every_user = [u for names in out.values() for u in names]
    if len(set(every_user)) != len(every_user):
        raise UserError("each relay user belongs to one region")
    reserved = {"admin", *out, *(f"leaf-{r}" for r in out)}  # the servers' own users: never a relay's
    taken = sorted(reserved & set(every_user))
    if taken:
        raise UserError(f"relay users may not be named {', '.join(taken)}: those names are the hub's admin, a "
                        "region or a region's leaf connection")
    if not out:
        raise UserError("expected at least one --region REGION:USER[,USER...]")
    return out


@click.command("nats-configs")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--region", "regions", multiple=True, metavar="REGION:USER[,USER...]", required=True,
              help="a region and the NATS users of its relays (repeatable)")
@click.option("--hub-host", default="127.0.0.1", show_default=True, help="where the regions' servers reach the hub")
@click.option("--hub-port", type=click.IntRange(1, 65535), default=4222, show_default=True)
@click.option("--leaf-port", type=click.IntRange(1, 65535), default=7422, show_default=True,
              help="the hub's port for the regions' leaf connections")
@click.option("--region-port", type=click.IntRange(1, 65535), default=4222, show_default=True,
              help="the port each region's server listens on (its relays connect there); each server is meant "
                   "for a host of its own: on one host, give the hub and the regions different ports")
@click.option("--domain", default="hub", show_default=True, help="the hub's JetStream domain (relays: --nats-domain)")
def nats_configs(out_dir: Path, regions: tuple[str, ...], hub_host: str, hub_port: int, leaf_port: int,
                 region_port: int, domain: str) -> None:
    """Write the hub's and every region's nats-server config, authorization on: relay users with a relay's
    permissions, leaf connections with a region's own user, no anonymous client anywhere."""
    by_region = parse_regions(regions)
    out_dir.mkdir(parents=True, exist_ok=True)
    leaf_passwords = {region: secrets.token_urlsafe(24) for region in by_region}
    passwords = {user: secrets.token_urlsafe(24) for users in by_region.values() for user in users}
    hub = hub_config(f"0.0.0.0:{hub_port}", f"0.0.0.0:{leaf_port}", Path("/var/lib/nats"), domain,
                     leaf_passwords, secrets.token_urlsafe(24))
    _secret_file(out_dir / "hub.conf", hub)
    for region, users in by_region.items():
        conf = region_config(region, f"0.0.0.0:{region_port}", f"nats-leaf://{hub_host}:{leaf_port}",
                             leaf_passwords[region], {u: passwords[u] for u in users}, RelayConfig().nats_bucket,
                             domain)
        _secret_file(out_dir / f"{region}.conf", conf)
        for user in users:
            _secret_file(out_dir / f"{user}.password", passwords[user] + "\n")
        click.echo(f"{region}: nats-server -c {out_dir / f'{region}.conf'}  (dials the hub as {leaf_user(region)}); "
                   f"relays: ce-bench relay --nats nats://HOST:{region_port} --region {region} --nats-domain "
                   f"{domain} --nats-user USER --nats-password-file {out_dir}/USER.password")
    click.echo(f"hub: nats-server -c {out_dir / 'hub.conf'}  (JetStream domain {domain}; admin password inside)")
