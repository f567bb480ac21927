#!/usr/bin/python3
"""delayd from Python: stubs generated now from the .proto with protoc and
grpc_python_plugin, Debian's python3-grpcio. A worker subscribes, receives
timers set from Python, acknowledges them; error statuses come through.

Over TLS with a bearer token: DELAYD_TLS_CA is the CA to check the daemon
against and DELAYD_TOKEN the token; a call without the token is refused.

Usage: client_test.py PROTO_ROOT   (DELAYD_ENDPOINT names the daemon)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

proto_root = sys.argv[1]
endpoint = os.environ["DELAYD_ENDPOINT"]
out = tempfile.mkdtemp()
try:
    subprocess.check_call([
        "protoc", f"-I{proto_root}", f"--python_out={out}",
        f"--grpc_out={out}",
        f"--plugin=protoc-gen-grpc={shutil.which('grpc_python_plugin')}",
        "delayd/v1/delayd.proto"
    ])
    sys.path.insert(0, out)

    import grpc
    from google.protobuf import duration_pb2
    from delayd.v1 import delayd_pb2 as pb
    from delayd.v1 import delayd_pb2_grpc as pb_grpc

    def nanos(ts):
        return ts.seconds * 1_000_000_000 + ts.nanos

    with open(os.environ["DELAYD_TLS_CA"], "rb") as f:
        tls = grpc.ssl_channel_credentials(root_certificates=f.read())
    # access_token_call_credentials sends "authorization: Bearer TOKEN".
    channel = grpc.secure_channel(
        endpoint,
        grpc.composite_channel_credentials(
            tls, grpc.access_token_call_credentials(os.environ["DELAYD_TOKEN"])))
    stub = pb_grpc.DelaydStub(channel)

    # TLS without the token: refused, and nothing changes.
    anonymous = grpc.secure_channel(endpoint, tls)
    try:
        pb_grpc.DelaydStub(anonymous).SetTimer(pb.SetTimerRequest(
            namespace="python", key="anonymous",
            delay=duration_pb2.Duration(seconds=60)), timeout=5)
        raise AssertionError("a call without a token was accepted")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED, err
    anonymous.close()
    ns = "python"

    # A worker: the first message (no events) says it is registered.
    stream = stub.Subscribe(pb.SubscribeRequest(
        namespace=ns, mode=pb.SubscribeRequest.WORKER, max_in_flight=10),
                            timeout=30)
    first = next(stream)
    assert len(first.events) == 0, first

    keys = [f"job-{i}" for i in range(5)]
    versions = {}
    for k in keys:
        r = stub.SetTimer(pb.SetTimerRequest(
            namespace=ns, key=k, payload=f"payload of {k}".encode(),
            delay=duration_pb2.Duration(nanos=50_000_000)),
                          timeout=5)
        assert r.version > 0 and not r.replaced, r
        versions[k] = r.version

    got = {}
    while len(got) < len(keys):
        msg = next(stream)
        for e in msg.events:
            assert e.namespace == ns and e.key in versions, e
            assert e.payload == f"payload of {e.key}".encode(), e
            assert e.version == versions[e.key], e
            assert nanos(e.fired_at) >= nanos(e.fire_time), "fired early"
            assert e.attempt == 1 and e.reason == pb.REASON_EXPIRED, e
            got[e.key] = e
    ack = stub.Ack(pb.AckRequest(namespace=ns,
                                 event_ids=[e.id for e in got.values()]),
                   timeout=5)
    assert ack.acked == len(keys) and not ack.unknown_ids, ack

    # Errors arrive as gRPC statuses naming the problem.
    try:
        stub.SetTimer(pb.SetTimerRequest(namespace=ns, key="",
                                         delay=duration_pb2.Duration()),
                      timeout=5)
        raise AssertionError("an empty key was accepted")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
        assert "key" in err.details(), err.details()
    try:
        stub.GetTimer(pb.GetTimerRequest(namespace=ns, key="no-such-job"),
                      timeout=5)
        raise AssertionError("a missing timer was found")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.NOT_FOUND, err

    # A failed job, in a namespace allowing 3 attempts with a backoff of
    # 300 ms doubling: nacked with retry_after, it comes back (attempt 2)
    # after that; nacked without, after the backoff of attempt 2 (600 ms);
    # nacked a third time, it becomes a dead letter, listed with the
    # worker's error; requeued, it comes back from attempt 1.
    stub.SetPolicy(pb.SetPolicyRequest(namespace=ns, policy=pb.Policy(
        max_attempts=3,
        initial_backoff=duration_pb2.Duration(nanos=300_000_000))),
                   timeout=5)
    stub.SetTimer(pb.SetTimerRequest(namespace=ns, key="flaky",
                                     delay=duration_pb2.Duration()),
                  timeout=5)
    failed = None
    while failed is None:
        for e in next(stream).events:
            failed = e
    assert failed.key == "flaky" and failed.attempt == 1, failed
    nacked_at = time.monotonic()
    nack = stub.Nack(pb.NackRequest(
        namespace=ns, event_ids=[failed.id],
        retry_after=duration_pb2.Duration(nanos=200_000_000)),
                     timeout=5)
    assert nack.nacked == 1 and not nack.unknown_ids, nack
    retried = None
    while retried is None:
        for e in next(stream).events:
            retried = e
    assert time.monotonic() - nacked_at >= 0.2, "retried early"
    assert retried.id == failed.id and retried.attempt == 2, retried
    nacked_at = time.monotonic()
    stub.Nack(pb.NackRequest(namespace=ns, event_ids=[failed.id]), timeout=5)
    retried = None
    while retried is None:
        for e in next(stream).events:
            retried = e
    assert time.monotonic() - nacked_at >= 0.6, "backed off too little"
    assert retried.id == failed.id and retried.attempt == 3, retried
    stub.Nack(pb.NackRequest(namespace=ns, event_ids=[retried.id],
                             error="card declined"), timeout=5)
    deadline = time.monotonic() + 10
    while stub.Stats(pb.StatsRequest(namespace=ns),
                     timeout=5).namespaces[0].dead_letters != 1:
        assert time.monotonic() < deadline, "no dead letter"
        time.sleep(0.01)  # The pause of a bounded poll.
    dead = stub.ListDeadLetters(pb.ListDeadLettersRequest(namespace=ns),
                                timeout=5).dead_letters
    assert len(dead) == 1 and dead[0].event.id == failed.id, dead
    assert dead[0].error == "card declined" and dead[0].event.attempt == 3
    requeued = stub.RequeueDeadLetters(pb.DeadLettersRequest(
        namespace=ns, event_ids=[failed.id]), timeout=5)
    assert requeued.count == 1, requeued
    again = None
    while again is None:
        for e in next(stream).events:
            again = e
    assert again.id == failed.id and again.attempt == 1, again
    assert stub.Ack(pb.AckRequest(namespace=ns, event_ids=[again.id]),
                    timeout=5).acked == 1

    # A recurring schedule (one run: max_runs): its run arrives as an event
    # with the schedule's key, payload and run number.
    sched = stub.SetSchedule(pb.SetScheduleRequest(
        namespace=ns, key="every-second", payload=b"tick",
        spec=pb.ScheduleSpec(every=duration_pb2.Duration(seconds=1),
                             max_runs=1)), timeout=5)
    assert sched.version > 0 and sched.runs == 0, sched
    run = None
    while run is None:
        for e in next(stream).events:
            run = e
    assert run.key == "every-second" and run.schedule_run == 1, run
    assert run.payload == b"tick", run
    assert stub.Ack(pb.AckRequest(namespace=ns, event_ids=[run.id]),
                    timeout=5).acked == 1
    done = stub.GetSchedule(pb.GetScheduleRequest(namespace=ns,
                                                  key="every-second"),
                            timeout=5)
    assert done.runs == 1 and not done.HasField("next_instant"), done

    # Nothing is left in flight once acknowledged (the Ack answered after
    # the dispatcher applied it).
    stats = stub.Stats(pb.StatsRequest(), timeout=5)
    assert stats.in_flight_events == 0, stats
    stream.cancel()
    channel.close()
    print(f"python client: {len(got)} events received and acknowledged, "
          "one nacked, backed off, dead-lettered and requeued; "
          "a schedule's run received; "
          "INVALID_ARGUMENT, NOT_FOUND and UNAUTHENTICATED seen (TLS, token)")
finally:
    shutil.rmtree(out)
