"""What the cluster tests share (run_with_cluster.sh): a steady load of
timers due 0.3 s after they are set, with one node killed (kill -9) and
another stopped (SIGTERM) while it runs.
"""
import os
import signal
import threading
import time


def load_through_faults(client, namespace: str, payload: bytes,
                        errors) -> set:
    """Sets a timer every 10 ms in `namespace`; node 0 is killed after
    1.5 s, node 1 stopped 2 s later, and the load ends 1.5 s after that.
    Each phase (before, between and after the faults) lasts at least that
    long and until 20 sets were acknowledged in it (30 s at most: CPU
    contention lengthens a phase, it does not empty it). Returns the keys
    whose set was acknowledged (a set that raised `errors` may or may not
    exist)."""
    pids = [int(p) for p in os.environ["DELAYD_TEST_NODE_PIDS"].split(",")]
    acked: set = set()
    # Sets acknowledged in each phase: before the kill, between the faults,
    # after the stop (each must have load: the faults happen under it).
    per_phase = [0, 0, 0]
    phase = [0]
    stop = threading.Event()
    counted = threading.Condition()

    def produce():
        i = 0
        while not stop.is_set():
            key = f"job-{i}"
            i += 1
            try:
                client.set_timer(key, payload, delay=0.3, namespace=namespace)
                with counted:
                    acked.add(key)
                    per_phase[phase[0]] += 1
                    counted.notify_all()
            except errors:
                pass  # Unanswered after its retries: may or may not exist.
            time.sleep(0.01)  # the load's pace

    producer = threading.Thread(target=produce)
    producer.start()

    def end_phase(seconds: float, then) -> None:
        time.sleep(seconds)  # the phase's length under load, not a wait
        with counted:
            counted.wait_for(lambda: per_phase[phase[0]] >= 20, timeout=30)
            then()
            if phase[0] < 2:
                phase[0] += 1

    end_phase(1.5, lambda: os.kill(pids[0], signal.SIGKILL))
    end_phase(2.0, lambda: os.kill(pids[1], signal.SIGTERM))
    end_phase(1.5, stop.set)
    producer.join()
    print(f"sets acknowledged by phase: {per_phase}")
    assert all(n >= 20 for n in per_phase), \
        f"the load was too small in a phase: {per_phase}"
    return acked
