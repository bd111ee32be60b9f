"""What to do to a host, as validated data: the recipe models, variables and their
precedence, and secret values kept out of everything patchkit writes."""
