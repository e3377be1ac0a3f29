"""A command-plan engine that never answers: it starts a grandchild that calls setsid (leaving the
process group), writes both pids to $HANG_PIDS, and sleeps. Used to prove that nothing it started
outlives `conformance run`."""

import os
import subprocess
import sys
import time

grandchild = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"])
time.sleep(0.8)   # let the orphan guard see the grandchild before it is asked to act
with open(os.environ["HANG_PIDS"] + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()} {grandchild.pid}\n")
os.replace(os.environ["HANG_PIDS"] + ".tmp", os.environ["HANG_PIDS"])
time.sleep(600)
