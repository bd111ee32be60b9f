"""set_value: make the target's value (or the part of it at `path`) equal a value."""
