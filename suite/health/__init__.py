"""Is this node healthy: results judged against expected figures, their peers in the run, and the fleet."""
