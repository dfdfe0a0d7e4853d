#!/usr/bin/env python3
"""The cluster manager, `loomd --role=manager`, driven by three fake instances over grpcio
(stubs compiled from proto/loom/v1/cluster.proto) with skewed loads: dispatch to the least loaded,
migration orders in Report replies, drain over HTTP, dropping a silent instance, /v1/instances,
/metrics (checked with promtool), invalid reports refused while it keeps serving, grpc.health.v1,
API keys on the HTTP routes, and a clean exit on SIGTERM. Every test starts its own manager (it loads no model: instant).

  python tests/integration/manager_test.py --loomd build/cpu-release/bin/loomd
"""
import argparse
import http.client
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_tools import protoc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = None
STUBS = tempfile.TemporaryDirectory()
TIMEOUT_MS = 1500  # manager_instance_timeout_ms in these tests
PAIR_MS = 100      # manager_pair_interval_ms


def setUpModule():
    rc = protoc.main(["protoc", f"-I{ROOT}/proto", f"--python_out={STUBS.name}",
                      f"--grpc_python_out={STUBS.name}", f"{ROOT}/proto/loom/v1/cluster.proto"])
    assert rc == 0
    sys.path.insert(0, STUBS.name)
    global pb, pb_grpc
    from loom.v1 import cluster_pb2 as pb, cluster_pb2_grpc as pb_grpc  # noqa: E402


def tearDownModule():
    STUBS.cleanup()


def start_manager(*extra):
    """The manager on loopback ports; returns (process, gRPC port, HTTP port)."""
    proc = subprocess.Popen(
        [ARGS.loomd, "--role", "manager", "--host", "127.0.0.1", "--port", "0", "--grpc-port", "0",
         "--manager-instance-timeout-ms", str(TIMEOUT_MS),
         "--manager-pair-interval-ms", str(PAIR_MS), *extra],
        stdout=subprocess.PIPE, stderr=None, text=True)  # its log goes to the test log
    grpc_line = proc.stdout.readline()
    http_line = proc.stdout.readline()
    assert grpc_line.startswith("loom manager gRPC listening on "), grpc_line
    assert http_line.startswith("loom manager listening on "), http_line
    return proc, int(grpc_line.strip().rsplit(":", 1)[1]), int(http_line.strip().rsplit(":", 1)[1])


def load(freeness, batch=2, shortest=2, free_blocks=500, draining=False, preempted=0):
    return pb.InstanceLoad(num_blocks=1000, num_free_blocks=free_blocks, num_running=batch,
                           batch_size=batch, freeness=freeness, dispatch_freeness=freeness,
                           shortest_running_blocks=shortest if batch else 0, draining=draining,
                           num_preempted_waiting=preempted)


class FakeInstance:
    """One serving instance as the manager sees it: an id, addresses and a load it reports."""

    def __init__(self, stub, instance_id, load_):
        self.stub, self.id, self.load, self.seq = stub, instance_id, load_, 0
        self.grpc_address = f"127.0.0.1:{50000 + len(instance_id)}"
        self.orders, self.drain = [], False

    def report(self):
        self.seq += 1
        reply = self.stub.Report(pb.InstanceReport(
            instance_id=self.id, grpc_address=self.grpc_address,
            http_address=f"127.0.0.1:{8000 + self.seq % 7}", load=self.load,
            report_seq=self.seq), timeout=10)
        self.orders.extend(reply.migrate)
        self.drain = self.drain or reply.drain
        return reply


class ManagerTest(unittest.TestCase):
    def setUp(self):
        self.proc, self.grpc_port, self.http_port = start_manager()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.stub = pb_grpc.ManagerStub(self.channel)
        # Skewed loads: one instance over its memory, one in the middle, one nearly idle.
        self.hot = FakeInstance(self.stub, "hot", load(-2.0, batch=4, shortest=2))
        self.mid = FakeInstance(self.stub, "mid", load(6.0, batch=4))
        self.cold = FakeInstance(self.stub, "cold", load(200.0, batch=2))
        self.instances = [self.hot, self.mid, self.cold]
        for i in self.instances:
            i.report()

    def tearDown(self):
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=30), 0)
        self.proc.stdout.close()

    def http(self, method, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read().decode()
        conn.close()
        return resp.status, resp.getheader("Content-Type"), body

    def report_for(self, seconds, instances=None):
        """Every instance (or those given) reports every 50 ms for `seconds`."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for i in instances if instances is not None else self.instances:
                i.report()
            time.sleep(0.05)

    def instances_listed(self):
        status, ctype, body = self.http("GET", "/v1/instances")
        self.assertEqual(status, 200)
        self.assertTrue(ctype.startswith("application/json"))
        doc = json.loads(body)
        self.assertEqual(doc["object"], "list")
        return {i["instance_id"]: i for i in doc["data"]}

    def metrics(self):
        status, ctype, body = self.http("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(ctype.startswith("text/plain"))
        self.assertNotRegex(body, r"(?i)\b(nan|inf)\b")
        values = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                name, value = line.split(" ")
                values[name] = float(value)
        return body, values

    def test_dispatch_goes_to_the_least_loaded(self):
        seen = set()
        by_id = {inst.id: inst for inst in self.instances}
        for _ in range(60):
            # A dispatch counts against its instance until that instance reports that it has
            # taken the request in.
            for inst in self.instances:
                inst.report()
            chosen = self.stub.Dispatch(pb.DispatchRequest(from_instance="mid", prompt_tokens=100),
                                        timeout=10).instance_id
            seen.add(chosen)
            if chosen in by_id:
                by_id[chosen].load.num_dispatched_in += 1
        # Top-2 by dispatch freeness: cold (200) and mid (6); hot (-2) is busy.
        self.assertEqual(seen, {"cold", "mid"})
        reply = self.stub.Dispatch(pb.DispatchRequest(prompt_tokens=1), timeout=10)
        self.assertEqual(reply.grpc_address,
                         {"cold": self.cold, "mid": self.mid}[reply.instance_id].grpc_address)
        _, values = self.metrics()
        self.assertEqual(values["loom_manager_dispatches_total"], 61)

    def test_an_empty_cluster_runs_requests_where_they_arrive(self):
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=30), 0)
        self.proc.stdout.close()
        self.channel.close()
        self.proc, self.grpc_port, self.http_port = start_manager()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.stub = pb_grpc.ManagerStub(self.channel)
        reply = self.stub.Dispatch(pb.DispatchRequest(prompt_tokens=5), timeout=10)
        self.assertEqual((reply.instance_id, reply.grpc_address), ("", ""))

    def test_the_overloaded_instance_is_told_to_migrate_to_the_idle_one(self):
        self.report_for(1.0)
        self.assertTrue(self.hot.orders, "no migrate order reached the overloaded instance")
        for order in self.hot.orders:
            self.assertEqual(order.destination_instance, "cold")
            self.assertEqual(order.destination_address, self.cold.grpc_address)
            self.assertEqual(order.max_requests, 1)
        self.assertEqual(self.mid.orders + self.cold.orders, [])
        _, values = self.metrics()
        self.assertEqual(values["loom_manager_migration_orders_total"], len(self.hot.orders))

    def test_no_order_when_the_move_would_not_narrow_the_gap(self):
        # The hot instance's shortest request is bigger than cold's whole budget.
        self.hot.load = load(-2.0, batch=4, shortest=5000)
        self.report_for(0.6)
        self.assertEqual(self.hot.orders, [])

    def test_drain_over_http(self):
        status, _, body = self.http("POST", "/v1/instances/mid/drain")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body), {"instance_id": "mid", "draining": True})
        self.mid.report()
        self.assertTrue(self.mid.drain)
        self.assertTrue(self.instances_listed()["mid"]["draining"])
        seen = {self.stub.Dispatch(pb.DispatchRequest(prompt_tokens=1), timeout=10).instance_id
                for _ in range(40)}
        self.assertEqual(seen, {"cold"})  # hot is busy, mid draining
        # The instance now reports -infinity (the sign convention) and is moved off first.
        self.mid.load = load(-math.inf, batch=3, draining=True)
        self.report_for(0.8)
        self.assertTrue(self.mid.orders)
        self.assertEqual(self.mid.orders[-1].destination_instance, "cold")
        self.assertEqual(self.mid.orders[-1].max_requests, 3)
        listed = self.instances_listed()["mid"]
        self.assertIsNone(listed["load"]["freeness"])  # JSON has no -infinity
        _, values = self.metrics()
        self.assertEqual(values["loom_manager_instances_draining"], 1)
        self.assertEqual(values["loom_manager_average_freeness"], (-2.0 + 200.0) / 2)
        # Unknown ids, wrong methods and malformed paths.
        status, _, body = self.http("POST", "/v1/instances/nobody/drain")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(body)["error"]["type"], "not_found_error")
        self.assertEqual(self.http("GET", "/v1/instances/mid/drain")[0], 405)
        self.assertEqual(self.http("POST", "/v1/instances/mid/drain/x")[0], 404)
        self.assertEqual(self.http("POST", "/v1/instances//drain")[0], 404)
        self.assertEqual(self.http("POST", "/v1/instances/%zz/drain")[0], 400)
        # Drain over gRPC: unknown answers ok = false with the reason.
        reply = self.stub.Drain(pb.DrainRequest(instance_id="nobody"), timeout=10)
        self.assertFalse(reply.ok)
        self.assertIn("nobody", reply.reason)
        self.assertTrue(self.stub.Drain(pb.DrainRequest(instance_id="cold"), timeout=10).ok)

    def test_a_silent_instance_is_dropped(self):
        self.report_for(0.3)
        self.assertEqual(set(self.instances_listed()), {"hot", "mid", "cold"})
        # hot falls silent; the others keep reporting past the timeout.
        self.report_for(TIMEOUT_MS / 1000 + 0.5, [self.mid, self.cold])
        self.assertEqual(set(self.instances_listed()), {"mid", "cold"})
        _, values = self.metrics()
        self.assertEqual(values["loom_manager_instances_dropped_total"], 1)
        self.assertEqual(values["loom_manager_instances"], 2)
        names = [i.instance_id for i in self.stub.ListInstances(pb.ListInstancesRequest(),
                                                               timeout=10).instances]
        self.assertEqual(names, ["cold", "mid"])
        # It comes back with its next report.
        self.hot.report()
        self.assertIn("hot", self.instances_listed())

    def test_instances_listing(self):
        listed = self.instances_listed()
        self.assertEqual(sorted(listed), ["cold", "hot", "mid"])
        hot = listed["hot"]
        self.assertEqual(hot["grpc_address"], self.hot.grpc_address)
        self.assertFalse(hot["draining"])
        self.assertGreaterEqual(hot["last_report_age_ms"], 0)
        self.assertEqual(hot["load"]["freeness"], -2.0)
        self.assertEqual(hot["load"]["batch_size"], 4)
        self.assertEqual(hot["load"]["shortest_running_blocks"], 2)
        self.assertEqual(self.http("POST", "/v1/instances")[0], 405)
        self.assertEqual(self.http("GET", "/nothing")[0], 404)

    def test_metrics_and_scale_signal(self):
        body, values = self.metrics()
        self.assertEqual(values["loom_manager_instances"], 3)
        self.assertEqual(values["loom_manager_instances_draining"], 0)
        self.assertAlmostEqual(values["loom_manager_average_freeness"], (-2.0 + 6.0 + 200.0) / 3)
        self.assertEqual(values["loom_manager_scale_signal"], 0)
        for name in values:
            self.assertTrue(re.fullmatch(r"loom_manager_[a-z_]+", name), name)
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool not found: deploy/install-deps.sh installs it")
        check = subprocess.run([promtool, "check", "metrics"], input=body.encode(),
                               capture_output=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertEqual(check.stdout + check.stderr, b"")
        # Everyone overloaded: scale out.
        for i in self.instances:
            i.load = load(1.0)
            i.report()
        self.assertEqual(self.metrics()[1]["loom_manager_scale_signal"], 1)
        # Everyone nearly idle, even with one fewer: scale in.
        for i in self.instances:
            i.load = load(900.0, batch=1, free_blocks=950)
            i.report()
        self.assertEqual(self.metrics()[1]["loom_manager_scale_signal"], -1)

    def test_invalid_reports_are_refused_and_it_keeps_serving(self):
        bad = [pb.InstanceReport(instance_id="", load=load(5.0)),
               pb.InstanceReport(instance_id="x" * 300, load=load(5.0)),
               pb.InstanceReport(instance_id="nan", load=load(math.nan)),
               pb.InstanceReport(instance_id="neg", load=pb.InstanceLoad(batch_size=-1))]
        for report in bad:
            with self.assertRaises(grpc.RpcError) as caught:
                self.stub.Report(report, timeout=10)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        # A message that is not an InstanceReport at all.
        raw = self.channel.unary_unary("/loom.v1.Manager/Report")
        with self.assertRaises(grpc.RpcError):
            raw(b"\xff\xff\xff", timeout=10)
        self.assertEqual(sorted(self.instances_listed()), ["cold", "hot", "mid"])
        self.assertEqual(self.http("GET", "/livez")[0], 200)
        self.assertEqual(self.http("GET", "/readyz")[0], 200)

    def test_grpc_health(self):
        health = health_pb2_grpc.HealthStub(self.channel)
        for service in ("", "loom.v1.Manager"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            self.assertEqual(reply.status, health_pb2.HealthCheckResponse.SERVING)


class ManagerConfigTest(unittest.TestCase):
    def test_api_keys_guard_everything_but_the_probes(self):
        proc, grpc_port, port = start_manager("--api-keys", "mkey")
        try:
            def get(method, path, key=None):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request(method, path, headers={"Authorization": f"Bearer {key}"} if key else {})
                status = conn.getresponse().status
                conn.close()
                return status
            for method, path in (("GET", "/v1/instances"), ("GET", "/metrics"),
                                 ("POST", "/v1/instances/a/drain")):
                self.assertEqual(get(method, path), 401)
                self.assertEqual(get(method, path, "wrong"), 401)
            self.assertEqual(get("GET", "/v1/instances", "mkey"), 200)
            self.assertEqual(get("GET", "/metrics", "mkey"), 200)
            self.assertEqual(get("POST", "/v1/instances/a/drain", "mkey"), 404)
            self.assertEqual(get("GET", "/livez"), 200)
            self.assertEqual(get("GET", "/readyz"), 200)
            # The gRPC methods too: reports, dispatch and drains from outside the cluster are
            # refused; the health service stays open for probes.
            channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
            stub = pb_grpc.ManagerStub(channel)
            calls = (
                (stub.Report, pb.InstanceReport(instance_id="x", grpc_address="127.0.0.1:1",
                                                load=load(5.0), report_seq=1)),
                (stub.Dispatch, pb.DispatchRequest(from_instance="x", prompt_tokens=3)),
                (stub.Drain, pb.DrainRequest(instance_id="x")),
                (stub.ListInstances, pb.ListInstancesRequest()),
            )
            for method, request in calls:
                for md in ([], [("authorization", "Bearer wrong")]):
                    with self.assertRaises(grpc.RpcError) as ctx:
                        method(request, metadata=md, timeout=10)
                    self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                method(request, metadata=[("authorization", "Bearer mkey")], timeout=10)
            listed = stub.ListInstances(pb.ListInstancesRequest(),
                                        metadata=[("authorization", "Bearer mkey")], timeout=10)
            self.assertEqual([i.instance_id for i in listed.instances], ["x"])
            health = health_pb2_grpc.HealthStub(channel)
            self.assertEqual(health.Check(health_pb2.HealthCheckRequest(service=""),
                                          timeout=10).status,
                             health_pb2.HealthCheckResponse.SERVING)
            channel.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=30), 0)
            proc.stdout.close()

    def test_a_manager_needs_a_grpc_port(self):
        run = subprocess.run([ARGS.loomd, "--role", "manager", "--port", "0"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(run.returncode, 2)
        self.assertIn("grpc-port", run.stderr)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
