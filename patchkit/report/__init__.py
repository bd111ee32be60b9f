"""Showing a run: one JSON document or a terminal table with diffs (`output`), and the review
of a run as an HTML page or Markdown (`review`)."""
