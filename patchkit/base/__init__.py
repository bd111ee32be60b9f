"""Plumbing every layer may use and that uses no other layer: errors, logging, YAML with
positions, the control cache folder, rollout batch sizes, invisible characters made visible."""
