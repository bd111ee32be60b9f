"""dict_set: make a dict display map a key to a value."""
