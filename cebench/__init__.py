"""The `ce-bench` command: the composition root that joins the node (host_runner) and the relay (web)."""
