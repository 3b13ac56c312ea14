"""NATS credentials of a relay, and the authorization a relay cluster's nats-server needs.

Anyone who can connect to an open nats-server can publish on the relays' subjects and put into their
buckets: replayed or forged profiles, transcripts, digests, link samples, beacons. Each relay therefore
connects as its own user of the server's `authorization` block (docs.nats.io, "Username/Password" and
"Authorization"), allowed to publish only on what a relay publishes and to subscribe only on what it reads:

- `--nats-user NAME` with the password in `--nats-password-file FILE` (one line, mode 0600) or in the
  CE_NATS_PASSWORD environment variable: never on the command line, where `ps` shows it to every local user
  (a URL with `user:password@` works too, for those who accept that);
- relay_permissions() is the permission set of one relay user, server_config() a whole nats-server config
  (web/cluster/nats_local.py writes one for `--processes N`; the README and docs/manual.md show one);
- check() connects once before the relay starts: credentials the server refuses end the command with one line
  saying what was expected, instead of a relay that retries them forever; a server that admits a client
  without credentials ends it too, unless the operator said `--nats-insecure` (issue 46).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.errors import UserError
from web.cluster.handoff import HANDOFF_SUBJECT
from web.cluster.regions import Subjects
from web.config import RelayConfig

PASSWORD_ENV = "CE_NATS_PASSWORD"
USER_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
# What a relay publishes and reads (web/cluster/nats_cluster.py's SUBJECT_*; tests/test_nats_auth.py holds them equal).
RELAY_SUBJECTS = ("ce.atlas.profiles", "ce.atlas.live-digests", "ce.relays.beacons", "ce.trust.transcripts",
                  "ce.atlas.links")
UNREACHABLE = "unreachable: "  # refusal()'s mark for a server that did not answer (not a refusal)
PROBE_TIMEOUT_S = 2.0  # check(): the connect's timeout, per try (two tries)


def _expected(user: str | None) -> str:
    who = f"the password of NATS user {user!r}" if user else "the NATS user's password"
    return f"a file holding {who} on one line (mode 0600), or ${PASSWORD_ENV}"


def read_password(path: Path, user: str | None) -> str:
    """The password in a --nats-password-file: one line, readable by its owner only."""
    try:
        mode = path.stat().st_mode & 0o777
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UserError(f"--nats-password-file {path}: {why}; expected {_expected(user)}") from None
    if mode & 0o077:
        raise UserError(f"--nats-password-file {path} is readable by others (mode {mode:o}); run chmod 600 {path}")
    lines = text.splitlines()
    if len(lines) != 1 or not lines[0].strip():
        found = "it is empty" if not text.strip() else f"found {len(lines)} lines"
        raise UserError(f"--nats-password-file {path}: {found}; expected {_expected(user)}")
    return lines[0].strip()


def credentials(config: RelayConfig) -> dict[str, str]:
    """nats.connect's `user` and `password` for this relay ({} without --nats-user)."""
    if config.nats_user is None:
        if config.nats_password_file is not None:
            raise UserError("--nats-password-file needs --nats-user NAME (the NATS user it is the password of)")
        return {}
    if not config.nats_url:
        raise UserError("--nats-user needs --nats URL (the nats-server whose authorization block has the user)")
    if config.nats_password_file is not None:
        password = read_password(config.nats_password_file, config.nats_user)
    elif os.environ.get(PASSWORD_ENV):
        password = os.environ[PASSWORD_ENV]
    else:
        raise UserError(f"--nats-user {config.nats_user} needs its password: --nats-password-file FILE or "
                        f"${PASSWORD_ENV}")
    return {"user": check_user(config.nats_user), "password": password}


def check_user(user: str) -> str:
    """A relay's NATS user name: it is also the prefix of the relay's keys in the shared buckets (writer_prefix),
    so it must be one subject token a key may hold."""
    if not USER_PATTERN.fullmatch(user):
        raise UserError(f"NATS user {user!r}: expected 1-64 letters, digits, '-' or '_' (the user names this "
                        "relay's keys in the cluster's buckets)")
    return user


def writer_prefix(config: RelayConfig, relay_id: str) -> str:
    """The first token of every key this relay writes into the profiles' and the link samples' buckets: its NATS
    user, whose permissions allow writes under that prefix only (relay_permissions(user=...)), so no relay user
    can overwrite or purge another's keys; the relay id on a server without users."""
    return config.nats_user if config.nats_user is not None else relay_id


def relay_permissions(bucket: str, region: str | None = None,
                      domain: str | None = None, user: str | None = None) -> dict[str, Any]:
    """One relay user's permissions: publish on the relay subjects, the JetStream API calls the key-value
    buckets take (look up, create, watch, read) and the buckets' own subjects; subscribe on the relay
    subjects and reply inboxes. Nothing else: no stream deletes or purges, no other subjects. With a region
    (web/cluster/regions.py): that region's subjects and links bucket, the regions' scoreboards, and the
    trust handoff (asks to any region, answered on this region's subject); with a JetStream domain (the
    hub's, for a relay on a region's leaf server): the buckets' API under that domain's prefix. With a user:
    writes into the profiles' and the link samples' buckets only under that user's keys (writer_prefix); the
    jobs' bucket stays shared (a relay takes over another's job with a compare-and-set on the job's key)."""
    subjects = Subjects.of(region)
    relay_subjects = list(RELAY_SUBJECTS) if region is None else [
        subjects.profiles, subjects.digests, subjects.beacons, subjects.transcripts, subjects.links,
        subjects.scoreboards]
    publish, subscribe = list(relay_subjects), [*relay_subjects, "_INBOX.>"]
    if region is not None:
        publish.append(f"{HANDOFF_SUBJECT}.*")  # an ask goes to the region the node left
        subscribe.append(f"{HANDOFF_SUBJECT}.{region}")
    api = f"$JS.{domain}.API" if domain else "$JS.API"
    links = f"{bucket}-links" + (f"-{region}" if region else "")
    for name in (bucket, links, f"{bucket}-jobs"):  # the profiles' bucket, the link samples' and the jobs'
        stream = f"KV_{name}"
        keys = f"{name}.{check_user(user)}.>" if user is not None and name != f"{bucket}-jobs" else f"{name}.>"
        publish += [f"{api}.STREAM.INFO.{stream}", f"{api}.STREAM.CREATE.{stream}",
                    f"{api}.CONSUMER.CREATE.{stream}", f"{api}.CONSUMER.CREATE.{stream}.>",
                    f"{api}.CONSUMER.DELETE.{stream}.>", f"{api}.CONSUMER.INFO.{stream}.>",
                    f"{api}.DIRECT.GET.{stream}", f"{api}.DIRECT.GET.{stream}.>",
                    f"{api}.STREAM.MSG.GET.{stream}",
                    f"$JS.FC.{stream}.>",  # the watchers' flow-control replies
                    f"$KV.{keys}"]
        if domain:
            publish.append(f"{api}.$KV.{keys}")  # a bucket write across the leaf (nats_cluster.py _kv_put)
    permissions: dict[str, Any] = {"publish": {"allow": publish}, "subscribe": {"allow": subscribe}}
    if region is not None:
        permissions["allow_responses"] = True  # the answer to a handoff ask goes to the asker's reply inbox
    return permissions


def authorization_block(permissions_of: Callable[[str], dict[str, Any]], users: dict[str, str]) -> list[str]:
    """The lines of a nats-server `authorization` block: every user (name -> password) with its own permissions
    (permissions_of(name): relay_permissions(..., user=name)); no `no_auth_user`, so a client without credentials
    is refused."""
    q = json.dumps  # a JSON string is a valid quoted string of the NATS config format
    lines = ["authorization {", "  users: ["]
    for name, password in users.items():
        permissions = permissions_of(check_user(name))
        lines += [f"    {{ user: {q(name)}, password: {q(password)}, permissions: {{"]
        for verb in ("publish", "subscribe"):
            lines.append(f"      {verb}: {{ allow: [{', '.join(q(s) for s in permissions[verb]['allow'])}] }}")
        if permissions.get("allow_responses"):
            lines.append("      allow_responses: true")
        lines.append("    } }")
    return [*lines, "  ]", "}"]


def server_config(users: dict[str, str], listen: str, store_dir: Path, bucket: str) -> str:
    """A nats-server config: JetStream, and one user per relay (name -> password) with relay_permissions()."""
    q = json.dumps
    lines = ["# written by ce-bench (web/cluster/nats_auth.py): one user per relay, no anonymous access",
             f"listen: {q(listen)}", f"jetstream {{ store_dir: {q(str(store_dir))} }}",
             *authorization_block(lambda user: relay_permissions(bucket, user=user), users), ""]
    return "\n".join(lines)


def shown(url: str) -> str:
    """The URL without any user:password@ in it (for messages)."""
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl() if "@" in parts.netloc else url


async def refusal(url: str, options: dict[str, str]) -> str | None:
    """The server's authorization error for these credentials; None when it accepts them; UNREACHABLE + why when
    it cannot be reached."""
    import nats
    from nats.errors import Error as NatsError

    async def quiet(exc: Exception) -> None:
        return None

    try:  # max_reconnect_attempts=1: two tries, then NoServersError (0 would retry forever in nats-py)
        nc = await nats.connect(url, connect_timeout=PROBE_TIMEOUT_S, allow_reconnect=False,
                                max_reconnect_attempts=1, reconnect_time_wait=0.1, error_cb=quiet, **options)
    except (NatsError, OSError, TimeoutError) as exc:
        text = str(exc).strip()
        return text if "authorization violation" in text.lower() else UNREACHABLE + (text or type(exc).__name__)
    await nc.close()
    return None


def reachable_refusal(config: RelayConfig, options: dict[str, str], say: Callable[[str], None]) -> str | None:
    """refusal() until the server answers, for at most nats_connect_wait_s, saying each try; then a UserError."""
    url = config.nats_url or ""
    deadline = time.monotonic() + config.nats_connect_wait_s
    while True:
        refused = asyncio.run(refusal(url, options))
        if refused is None or not refused.startswith(UNREACHABLE):
            return refused
        why = refused.removeprefix(UNREACHABLE)
        if time.monotonic() >= deadline:
            raise UserError(f"NATS at {shown(url)} cannot be reached ({why}) after "
                            f"{config.nats_connect_wait_s:g} s: start the nats-server first, or check --nats "
                            "(--nats-connect-wait-s waits longer)")
        say(f"waiting for NATS at {shown(url)} ({why}); up to {config.nats_connect_wait_s:g} s")
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))


def check(config: RelayConfig, say: Callable[[str], None] | None = None) -> None:
    """Reads the relay's NATS credentials and tries them: a bad file, refused credentials or a server that
    cannot be reached within nats_connect_wait_s raise a one-line UserError naming what was expected."""
    options = credentials(config)
    if not config.nats_url:
        return
    refused = reachable_refusal(config, options, say or (lambda line: print(line, file=sys.stderr, flush=True)))
    if refused is None:
        # the same server without any credentials (a user:password@ in the URL counts as credentials)
        credentialed = bool(options) or "@" in urllib.parse.urlsplit(config.nats_url).netloc
        anonymous = asyncio.run(refusal(shown(config.nats_url), {})) if credentialed else None
        if anonymous is None and not config.nats_insecure:
            raise UserError(f"NATS at {shown(config.nats_url)} admits clients without credentials: anyone who reaches "
                            "it can publish on the relays' subjects and write their buckets. Expected a server "
                            "with an authorization block and no no_auth_user (docs/manual.md, \"A relay cluster\"); "
                            "run with --nats-insecure to accept that")
        return
    where = f"NATS at {shown(config.nats_url)}"
    if options:
        source = f"--nats-password-file {config.nats_password_file}" if config.nats_password_file else \
            f"${PASSWORD_ENV}"
        raise UserError(f"{where} refused user {options['user']!r} ({refused}): expected the password that user "
                        f"has in the nats-server's authorization block, in {source}")
    if "@" in urllib.parse.urlsplit(config.nats_url).netloc:
        raise UserError(f"{where} refused the user:password in the --nats URL ({refused}): expected a user of "
                        "the nats-server's authorization block with its password")
    raise UserError(f"{where} refused a connection without credentials ({refused}): expected --nats-user NAME "
                    f"with its password in --nats-password-file FILE or ${PASSWORD_ENV}")
