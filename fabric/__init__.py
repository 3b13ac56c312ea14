"""The Fabric Map SDK ("ce-graph"): link samples, Vivaldi coordinates, the query contract of seed 000
§3.4, and FabricStats — what schedulers ask instead of guessing."""

from fabric.graph import FabricMap, UnknownNode

__all__ = ["FabricMap", "UnknownNode"]
