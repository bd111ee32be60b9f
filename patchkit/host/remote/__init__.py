"""Files that run on the host, in the agent's one namespace, never on the control machine.

core.py is sent at every start; each other file is an extension sent with the first op it
declares (@op). Nothing here is imported: client.py reads these files as text (to send
them, and to read their op declarations). Stdlib only, Python >= 3.8.
"""
