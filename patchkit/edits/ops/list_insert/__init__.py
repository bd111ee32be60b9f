"""list_insert: make sure values are elements of a list/tuple/set display."""
