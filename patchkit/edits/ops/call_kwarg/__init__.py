"""call_kwarg: make a call to a callee pass a keyword argument with a value."""
