"""Checkpoint reading on the host: an extension of the host agent (core.py).

Sent, with the checkpoint reader it calls, when a run first reads a checkpoint on the host.
The reader itself is patchkit/host/checkpoint/reader.py, a stdlib-only library the control side
also runs (to validate a deploy's source): one copy, shipped ahead of this file and run in
the same namespace, so `read_checkpoint` here is the reader's. Stdlib only, Python >= 3.8.
"""


@op
def op_read_checkpoint(path):
    return read_checkpoint(expand(path))
