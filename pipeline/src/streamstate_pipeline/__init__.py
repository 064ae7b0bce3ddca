"""What the pipeline's deployables share: settings, wire contracts, topics, client configuration."""
