"""Fan-out nodes: consensus, round_robin and map."""
