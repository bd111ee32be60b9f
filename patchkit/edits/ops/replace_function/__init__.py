"""replace_function: make a function's body equal a wanted body, compared by meaning."""
