"""Every Vivaldi default with its unit and source (hashicorp/serf coordinate/config.go is the reference;
values are Serf's, converted from seconds to milliseconds where they carry a unit)."""

from __future__ import annotations

from dataclasses import dataclass

from capsule.model import LINK_RTT_MAX_MS


@dataclass(frozen=True)
class VivaldiConfig:
    # Dimensions of the Euclidean part of a coordinate (Serf: 8).
    dimensionality: int = 8
    # Largest error estimate a coordinate may carry; new coordinates start here (Serf: 1.5).
    error_max: float = 1.5
    # How fast the error estimate follows new observations, c_e in the Vivaldi paper (Serf: 0.25).
    ce: float = 0.25
    # Timestep factor of each coordinate update, c_c in the paper (Serf: 0.25).
    cc: float = 0.25
    # Samples averaged for the per-node adjustment term that absorbs non-Euclidean offsets (Serf: 20).
    adjustment_window: int = 20
    # Smallest height, ms (Serf: 10 microseconds). Heights model the access link of a node.
    height_min_ms: float = 0.01
    # RTT samples per peer whose median feeds an update: one outlier never moves a coordinate (Serf: 3).
    latency_filter_size: int = 3
    # Gravity towards the origin, so a whole cluster's coordinates do not drift: each update moves a
    # coordinate (d / rho)^2 seconds towards the origin, d its distance in seconds (Serf: rho = 150).
    gravity_rho_s: float = 150.0
    # RTTs above this are refused as absurd, ms (capsule.model's link ceiling; the Earth's circumference
    # is ~130 ms at c, so anything near it is a stalled path, not distance).
    rtt_max_ms: float = LINK_RTT_MAX_MS


DEFAULT = VivaldiConfig()
