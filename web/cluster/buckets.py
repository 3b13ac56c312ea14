"""The cluster's JetStream key-value buckets, made and checked so that a relay user can touch its own keys only.

nats-server permissions (web/cluster/nats_auth.py) scope each relay user's writes to the keys under its own
name, but a bucket made by nats.py's `create_key_value` allows rollup headers: one message with `Nats-Rollup: all`
on a subject the user may publish (its own key) purges every key of the bucket, everyone's (found by a review,
2026-12-07). And whoever makes a bucket first chooses its stream's config (a subject transform could map one
user's keys onto another's; a republish could leak them). So:

- Buckets.open() makes a missing bucket as nats.py does, except that rollups are refused (nothing in web/ purges
  a key: a key is only ever overwritten with a newer verified record);
- and checks an existing one (problems()): a bucket that allows rollups, takes other subjects, transforms or
  republishes them, or mirrors or sources another stream is fixed where this relay may update the stream (a
  server without users) and otherwise reported once per bucket, loudly, with the command that fixes it.
"""

from __future__ import annotations

import logging
from typing import Any

from nats.js import api
from nats.js.errors import Error as JetStreamError

log = logging.getLogger("ce.cluster")

HISTORY = 1  # one value per key: the newest record (older ones are never read)
DUPLICATE_WINDOW_S = 120.0  # as nats.py's create_key_value


def stream_config(name: str) -> api.StreamConfig:
    """nats.py's key-value stream for `name`, rollup headers refused."""
    return api.StreamConfig(
        name=f"KV_{name}", subjects=[f"$KV.{name}.>"], allow_direct=True, allow_rollup_hdrs=False,
        deny_delete=True, deny_purge=True, discard=api.DiscardPolicy.NEW, duplicate_window=DUPLICATE_WINDOW_S,
        max_consumers=-1, max_msgs=-1, max_msgs_per_subject=HISTORY, num_replicas=1,
        storage=api.StorageType.FILE)


def problems(config: api.StreamConfig, name: str) -> list[str]:
    """What lets one relay user change another's keys in this bucket's stream ([] when nothing)."""
    found = []
    if config.allow_rollup_hdrs:
        found.append("it allows rollup headers (one message purges every relay's keys)")
    if list(config.subjects or []) != [f"$KV.{name}.>"]:
        found.append(f"it takes the subjects {config.subjects} (expected only $KV.{name}.>)")
    if config.subject_transform is not None:
        found.append("it transforms subjects (one user's keys may land on another's)")
    if config.republish is not None:
        found.append("it republishes its messages")
    if config.mirror is not None or config.sources:
        found.append("it mirrors or sources another stream")
    return found


class Buckets:
    """Opens the cluster's buckets through one JetStream context, checking each once."""

    def __init__(self) -> None:
        self._checked: set[str] = set()

    async def open(self, js: Any, name: str) -> Any:
        try:
            kv = await js.key_value(name)
        except JetStreamError:
            await js.add_stream(stream_config(name))
            kv = await js.key_value(name)
        if name not in self._checked:
            await self._check(js, name)
        return kv

    async def _check(self, js: Any, name: str) -> None:
        config = (await js.stream_info(f"KV_{name}")).config
        if config.allow_rollup_hdrs:
            config.allow_rollup_hdrs = False
            try:  # permitted on a server without users (or to an admin); a relay user may not update streams
                config = (await js.update_stream(config)).config
                log.warning("bucket %s allowed rollup headers; refused from now on", name)
            except (JetStreamError, TimeoutError):  # (a forbidden API call is dropped: no answer comes)
                config.allow_rollup_hdrs = True
        self._checked.add(name)
        found = problems(config, name)
        if found:
            log.error("bucket %s is not safe to share: %s; have the NATS operator run `nats stream edit KV_%s "
                      "--no-allow-rollup` (or recreate the stream as web/cluster/buckets.py stream_config makes it)",
                      name, "; ".join(found), name)
