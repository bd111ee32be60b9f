# A test-only Ansible callback: every task result, as the module returned it (before the stdout
# callback trims it), one JSON line each in $PATCHKIT_TEST_RESULTS. The default stdout
# callback still prints what a user sees; tests assert on both.
"""Record every task result of an ansible-playbook run as JSON lines."""

import json
import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record_results"
    CALLBACK_NEEDS_ENABLED = True

    def _record(self, result, outcome):
        line = {"host": result._host.get_name(), "task": result._task.get_name(), "outcome": outcome,
                "result": result._result}
        with open(os.environ["PATCHKIT_TEST_RESULTS"], "a") as out:
            out.write(json.dumps(line, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")
