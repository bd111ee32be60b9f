"""codemod: run a user's own libcst transformer from a Python file next to the recipe."""
