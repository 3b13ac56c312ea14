"""The intake: what a relay does with a record it takes, whichever way it arrived (HTTP, the mesh, NATS)."""
