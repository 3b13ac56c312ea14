"""The HTTP API: the Starlette app and its endpoints, profile intake, problems, metrics, limits, TLS and logs."""
