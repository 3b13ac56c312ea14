"""The cluster on NATS: shared profiles, digests of who is live where, transcripts, regions and nodes moving between
them, NATS users and the local server of --processes."""
