"""The ``cbs`` entry point as a Unix filter: a reader that closes the pipe early (``| head``)."""

import os
import subprocess
import sys


def test_a_reader_that_closes_the_pipe_ends_cbs_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line is written
    try:
        done = subprocess.run([sys.executable, "-c", "import sys, cbs; sys.exit(cbs.main(['study', 'fields']))"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr
