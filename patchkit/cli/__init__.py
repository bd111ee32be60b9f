"""The edge: arguments in (parser), one function per command (commands; targets: the recipe and
hosts they share), an exit code out (main), a cheap start (startup), shell completion."""
