"""Running a command on hosts: the runner, the fan-out over hosts, the journal on each host,
the results, and the step kinds (`steps/`) that do the work."""
