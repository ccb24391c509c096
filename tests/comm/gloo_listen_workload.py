"""Two ranks of mptrain's own gloo group (``DistSpec``), forked from this script: prints, as
JSON, the addresses each rank listens on once the group is formed. Run by test_dist.py under
a host name that resolves elsewhere than loopback."""

import json
import multiprocessing
import os

import psutil

from mptrain.comm.dist import DistSpec
from mptrain.launch.lifecycle import die_with_parent


def rank(spec, index, parent, results):
    die_with_parent(parent)
    group = spec.attach(index)
    listening = sorted({c.laddr.ip for c in psutil.Process().net_connections("tcp")
                        if c.status == psutil.CONN_LISTEN})
    group.barrier()            # both ranks listen before either looks or leaves
    results.put(listening)
    group.close()


def main():
    spec = DistSpec("gloo", 2, 30.0)
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    ranks = [context.Process(target=rank, args=(spec, i, os.getpid(), results))
             for i in range(2)]
    try:
        for process in ranks:
            process.start()
        said = [results.get(timeout=60) for _ in ranks]
    finally:
        for process in ranks:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join()
        spec.release()
    print(json.dumps(said))


if __name__ == "__main__":
    main()
