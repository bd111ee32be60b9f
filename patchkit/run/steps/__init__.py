"""Step kinds: each reads the host to plan, then changes it (or not) to apply."""
