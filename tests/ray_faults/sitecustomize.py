"""A fault for the Ray tier: a Ray Client server process that dies at its start.

On the PYTHONPATH of the test cluster's head only (tests/raycluster.py). The head starts one
"specific" Ray Client server per client; when the file named by PATCHKIT_TEST_CLIENT_SERVER_FAULT
exists, the next such process exits at once, as one did on a loaded CI machine (Ray's client
then waits for an answer forever). The file holding `always` fails every one; otherwise the
file is removed, so only the next one fails. Every other process is left alone.
"""

import os

_flag = os.environ.get("PATCHKIT_TEST_CLIENT_SERVER_FAULT")
if _flag and os.path.exists(_flag):
    try:
        with open("/proc/self/cmdline", "rb") as _f:
            _specific = b"specific-server" in _f.read()
        if _specific:
            with open(_flag) as _f:
                _always = _f.read().strip() == "always"
            if not _always:
                os.unlink(_flag)
            os._exit(1)
    except OSError:
        pass
