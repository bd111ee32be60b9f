"""The edge: arguments in (parser), one function per command (commands), a report and an
exit code out (main); what keeps a command's start cheap (startup); shell completion."""
