"""The edge: arguments in, one report out, an exit code (`main`), and what the start of a
command needs (shell completion, the garbage collector during start-up)."""
