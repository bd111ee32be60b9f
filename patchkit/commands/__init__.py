"""The commands beyond apply/plan/status/rollback/history: audit, capture, bake and the
release test, and the files a command writes for the user."""
