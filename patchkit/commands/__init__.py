"""The commands beyond apply/plan/status/rollback/history: audit, capture, bake, the start-up
bundle and the release test, and the files a command writes for the user."""
