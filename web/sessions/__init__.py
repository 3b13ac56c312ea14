"""Live sessions: WS /v1/live (frames, liveness by pongs, per-address limits) and the relay's own event-loop lag."""
