"""The ce-bench relay: verifies signed NodeProfiles, keeps the atlas durable, serves the scoreboard,
issues the beacon, tracks live nodes, and scales out over NATS JetStream."""
