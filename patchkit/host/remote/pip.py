"""A pip step's ops: which version of a distribution the target interpreter has, and pip run
by it to install a pinned version (or to uninstall): an extension of the host agent (core.py),
sent when a run first plans a pip step.

Stdlib only, Python >= 3.8.
"""

# The version a fresh target interpreter finds (JSON null: none installed).
VERSION_OF = (
    "import importlib.metadata as m, json, sys\n"
    "try:\n"
    "    found = m.version(sys.argv[1])\n"
    "except m.PackageNotFoundError:\n"
    "    found = None\n"
    "print(json.dumps(found))\n"
)

# pip as `python -m pip` runs it, but started by run_python: cwd / and no working folder on
# sys.path, so a `pip/` folder where the agent runs cannot stand in for the real one.
PIP_MAIN = "import runpy; runpy.run_module('pip', run_name='__main__', alter_sys=True)"


def installed_version(name, timeout_s):
    run = run_python(VERSION_OF, timeout_s, args=[name])
    lines = run["stdout"].strip().splitlines()
    if run["returncode"] != 0 or not lines:
        problem = (run["stderr"].strip().splitlines() or ["timed out" if run["timed_out"] else "no answer"])[-1]
        raise Refused("cannot read the installed version of %s with %s: %s" % (name, sys.executable, problem))
    return json.loads(lines[-1])


@op
def op_pip_version(name, timeout_s):
    return {"version": installed_version(name, timeout_s), "python": sys.executable}


@op(mutating=True)
def op_pip_install(name, version, options, timeout_s):
    """pip install NAME==VERSION with the recipe's options; with version None, pip uninstall -y NAME."""
    if version is None:
        argv = ["uninstall", "-y", name]
    else:
        argv = ["install", "%s==%s" % (name, version)] + list(options)
    run = run_python(PIP_MAIN, timeout_s, args=argv)
    return {"run": run, "version": installed_version(name, timeout_s)}
