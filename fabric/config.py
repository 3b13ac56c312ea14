"""Every Vivaldi default with its unit and source (hashicorp/serf coordinate/config.go is the reference;
values are Serf's, converted from seconds to milliseconds where they carry a unit), and the defaults of the
defence against lying nodes (fabric/defence.py, issue 18), each with its unit and where its value comes from."""

from __future__ import annotations

from dataclasses import dataclass

from capsule.model import LINK_RTT_MAX_MS


@dataclass(frozen=True)
class DefenceConfig:
    """The defence against lying nodes (fabric/defence.py). Residuals are unitless |ln(reported / landmark-
    consistent prediction)| (0.1 ~ 10 % off), so one threshold serves inflation and deflation alike. The
    structure follows Kaafar et al. (SIGCOMM 2007: trusted landmarks, a residual test per sample), Zage and
    Nita-Rotaru (CCS 2007: outliers against the population) and Chan-Tin et al. (2009: frog-boiling beats
    thresholds on the current coordinates, so the reference here is what the landmarks measured). The values
    were tuned on fabric/adversary.py's seeded worlds (6 seeds, bench/vivaldi_liars.py prints the effect)."""

    # Off: every sample counts with full weight and landmarks move like any node (plain Serf Vivaldi).
    enabled: bool = True
    # Trusted (landmark) samples a node's anchor coordinate needs before its peer samples count at all; until
    # then only landmarks move it (count; two per landmark with 6 landmarks: lies that arrive before the anchor
    # is placed cannot be judged).
    anchor_warmup_samples: int = 12
    # A peer sample whose residual exceeds factor x the typical residual (the median node score) starts losing
    # weight, reaching zero at twice that (unitless; the liar-free world loses 2.2 % accuracy at 5, 3.6 % at
    # 3, mean over 6 seeds; 5 still stops every strategy).
    sample_threshold_factor: float = 5.0
    # The sample threshold never goes below this residual (unitless log-ratio; 0.1 ~ 10 %, the latency noise
    # of a loaded path), so very precise anchors do not turn honest jitter into lies.
    residual_floor: float = 0.1
    # Distinct peers whose latest residual each node keeps; its score is their median, one vote per peer, so a
    # liar that samples a victim eagerly still has one vote (count; 24 let eager liars fill the window).
    node_window: int = 64
    # A node whose score exceeds factor x the typical residual starts losing weight on all its samples,
    # reaching zero at twice that (unitless; in the seeded worlds honest scores stay under ~2x the typical one,
    # the liars' are 5-10x).
    reputation_factor: float = 2.0
    # Triangle envelope through each landmark both endpoints were measured by: a sample above factor x
    # (rtt_aL + rtt_bL) + slack or below (|rtt_aL - rtt_bL| - slack) / factor contradicts a landmark and
    # gets no weight (factor unitless, slack ms; web/config.py RelayConfig link_tiv_factor / link_slack_ms).
    envelope_factor: float = 2.0
    envelope_slack_ms: float = 5.0
    # Drift limit (error-rise detector): a node whose coordinate predicts its landmark RTTs worse than factor x
    # its anchor does (median residual over its landmarks, at least drift_floor) takes no peer samples until
    # the landmarks pull it back (unitless; defence in depth: in the seeded worlds the residual test and the
    # reputation stop the lies first, and turning it off moves no absolute error by more than 0.0002).
    drift_factor: float = 2.0
    drift_floor: float = 0.15
    # Scores, the typical residual and trust are recomputed every this many peer samples (count; cost only).
    refresh_every: int = 128


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
    # The defence against lying nodes (fabric/defence.py); DefenceConfig(enabled=False) is plain Vivaldi.
    defence: DefenceConfig = DefenceConfig()


DEFAULT = VivaldiConfig()
