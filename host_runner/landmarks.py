"""A node's landmark probes: the client lives in common/landmark_probe.py (relays probe their peer relays with
it too, for the landmarks' own mesh); this module keeps the name nodes and tests import."""

from common.landmark_probe import (
    PROBE_TIMEOUT_S,
    UNKNOWN_NODE_RETRY_S,
    UNKNOWN_NODE_TRIES,
    Landmark,
    ProbeError,
    landmarks,
    probe,
)

__all__ = ["PROBE_TIMEOUT_S", "UNKNOWN_NODE_RETRY_S", "UNKNOWN_NODE_TRIES", "Landmark", "ProbeError", "landmarks",
           "probe"]
