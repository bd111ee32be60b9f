"""list_remove: make sure values are not elements of a list/tuple/set display."""
