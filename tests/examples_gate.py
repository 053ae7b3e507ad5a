"""The first script of a torchrun job of examples/run_all.py that is started
in the background, before the test that checks it runs
(tests/device/examples_job.py, tests/cluster/conftest.py): it returns once
the file IBVERBS_EXAMPLES_GO names exists.

Under emulation `import torch` costs about a minute a process and a job
starts three (the agent, then its workers), while the tests before it
leave the VM's vCPUs idle much of the time: started niced with the
session, the job's imports take that idle time, and its verbs start only
when the test that checks them says go, with the devices to itself (no
other test's resource counts or fault injection see its QPs).

run_all runs this as an example of its own; it reports "passed" like the
others.  An hour without the go (a session that died without stopping the
job) ends it with a failure.
"""
import os
import sys
import time

GO = os.environ["IBVERBS_EXAMPLES_GO"]
deadline = time.monotonic() + 3600
while not os.path.exists(GO):
    if time.monotonic() > deadline:
        sys.exit(f"examples_gate: no {GO} within an hour")
    time.sleep(0.2)
