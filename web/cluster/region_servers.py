"""nats-server configs for a cluster that grows by region, with authorization everywhere (issue 46).

The topology is docs/manual.md's "Sizing a cluster": a hub that runs JetStream with a domain (the cluster's
buckets) and one server per region, each a leaf node of the hub. Here every part asks for credentials:

- the hub admits leaf connections only with a region's leaf user and password (`leafnodes.authorization`), and
  client connections only as its admin user (nobody else connects to the hub directly);
- a region's server admits its relays only, each as its own user with relay_permissions(bucket, region,
  domain, user) (web/cluster/nats_auth.py): that region's subjects, the global ones, the trust handoff, and the
  buckets' JetStream API under the hub's domain, writing only its own keys; no `no_auth_user`, so an anonymous
  client is refused;
- the region's server dials the hub as that region's leaf user.

A region's relays therefore run as they do on one authorized server (`--nats URL --nats-user NAME
--nats-password-file FILE --region R --nats-domain D`), and the configs are what tests/nats_regions.py runs.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

from web.cluster.nats_auth import authorization_block, relay_permissions
from web.cluster.regions import check_region

q = json.dumps  # a JSON string is a valid quoted string of the NATS config format


def leaf_user(region: str) -> str:
    """The user a region's server connects to the hub as."""
    return f"leaf-{check_region(region)}"


def hub_config(listen: str, leaf_listen: str, store_dir: Path, domain: str, leaf_passwords: dict[str, str],
               admin_password: str, http: str | None = None) -> str:
    """The hub: JetStream in `domain`; leaf connections only with a region's leaf user (region -> password);
    clients only as "admin"."""
    lines = ["# written by ce-bench (web/cluster/region_servers.py): the hub of a cluster of regions",
             "server_name: hub", f"listen: {q(listen)}",
             f"jetstream {{ store_dir: {q(str(store_dir))}, domain: {q(domain)} }}",
             f"authorization {{ users: [ {{ user: \"admin\", password: {q(admin_password)} }} ] }}",
             f"leafnodes {{ listen: {q(leaf_listen)}, authorization {{ users: ["]
    lines += [f"  {{ user: {q(leaf_user(region))}, password: {q(password)} }}"
              for region, password in leaf_passwords.items()]
    lines += ["] } }"] + ([f"http: {q(http)}"] if http else []) + [""]
    return "\n".join(lines)


def region_config(region: str, listen: str, hub_leaf_url: str, leaf_password: str, relays: dict[str, str],
                  bucket: str, domain: str, http: str | None = None) -> str:
    """A region's server: its relays (user -> password) with the region's permissions, and a leaf connection
    to the hub (hub_leaf_url: nats-leaf://HOST:PORT) as the region's leaf user."""
    parts = urllib.parse.urlsplit(hub_leaf_url)
    credentials = f"{urllib.parse.quote(leaf_user(region))}:{urllib.parse.quote(leaf_password, safe='')}"
    remote = parts._replace(netloc=f"{credentials}@{parts.netloc}").geturl()
    lines = [f"# written by ce-bench (web/cluster/region_servers.py): region {region}'s server",
             f"server_name: {q(region)}", f"listen: {q(listen)}",
             *authorization_block(lambda user: relay_permissions(bucket, region, domain, user), relays)]
    lines.append(f"leafnodes {{ remotes: [ {{ url: {q(remote)} }} ] }}")
    lines += ([f"http: {q(http)}"] if http else []) + [""]
    return "\n".join(lines)
