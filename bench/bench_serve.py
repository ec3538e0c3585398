"""Serving load in the manner of MLPerf LoadGen: ``glowc serve`` on 127.0.0.1 (the small example ResNet,
``glow_conformance.example_models.resnet`` with a symbolic batch, cpu backend, one device of one thread per
replica), with 1 and then 2 replicas, driven over the Open Inference Protocol v2 (binary tensors, as
tritonclient and Triton's perf_analyzer send them; one image per request).

* Offline scenario: ``--offline-requests`` requests kept ``--concurrency`` in flight (closed loop): throughput;
  once more with ``--max-batch`` images per request (images per second: less protocol overhead per image).
* Server scenario: Poisson arrivals at a target rate (open loop: a request is sent at its arrival time whether
  or not earlier ones have answered; latency counts from that time), each run ``--seconds`` long or
  ``--min-requests`` requests (so that a p99 means something), bounded by ``--max-requests`` and
  ``--max-seconds``: p50/p99 latency. The highest rate whose p99 stays under ``--p99-ms`` (50 ms) is searched:
  rates rise from ``--start-rate`` by ``--step`` until p99 fails (or halve down to ``--min-rate`` until it
  holds), then the interval between is halved ``--refine`` times.
* Side by side, in the same run: the model compiled in this process (cpu, one thread) and onnxruntime (one
  thread), alternating, median latency of one image: the compute floor under the serving overhead; and Ray
  Serve's own floor, an echo deployment (one replica, one CPU) answering the same requests with a fixed body
  (offline throughput, and p50/p99 at the Server scenario's lowest rate tried): what any Ray Serve application
  pays on this machine.

Every answer is checked against ``glow_core.compile(model, "cpu").run`` on the same image (the server's
dynamic batches must not mix rows up). Timings on a shared machine are noisy: the load average is reported
before and after each scenario.

    python bench/bench_serve.py [--replicas 1,2] [--seconds 10] [--json FILE]
    python bench/bench_serve.py --quick      # a smoke run: few requests, two rates
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.alternate import alternating_rounds, timed_runs  # noqa: E402
import glow_core  # noqa: E402
from glow_conformance import example_models as models  # noqa: E402
from glow_tools.serve import free_port  # noqa: E402

NAME = "resnet"
ORT_IR_VERSION = 8  # onnx.helper writes the newest IR version; onnxruntime may not read it yet


def request_body(x: np.ndarray) -> tuple[bytes, dict]:
    """An OIP v2 infer request with binary input and output (the Inference-Header-Content-Length extension)."""
    header = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
    return header + x.tobytes(), {"Inference-Header-Content-Length": str(len(header)),
                                  "Content-Type": "application/octet-stream"}


def output_of(body: bytes, headers) -> np.ndarray:
    n = int(headers["Inference-Header-Content-Length"])
    (o,) = json.loads(body[:n])["outputs"]
    return np.frombuffer(body[n:], np.float32).reshape(o["shape"])


class Client:
    """Keep-alive HTTP connections, one per thread, to the server's infer endpoint."""

    def __init__(self, port: int, timeout: float):
        self.port, self.timeout = port, timeout
        self.local = threading.local()

    def infer(self, body: bytes, headers: dict) -> np.ndarray:
        for attempt in (0, 1):  # a keep-alive connection the server closed is reopened once
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                conn.request("POST", f"/v2/models/{NAME}/infer", body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
            except (http.client.HTTPException, ConnectionError):
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
                continue
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
            return output_of(data, r.headers)
        raise AssertionError("unreachable")


class Server:
    """``glowc serve`` in a subprocess with its own Ray cluster (own RAY_TMPDIR); stopped with SIGTERM."""

    def __init__(self, model_path: str, replicas: int, max_batch: int, timeout: float):
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix="glowbench")
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["RAY_TMPDIR"] = self.tmp
        self.log = open(os.path.join(self.tmp, "glowc.log"), "w+")
        self.out = open(os.path.join(self.tmp, "glowc.out"), "w+")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "glow_tools.cli", "serve", model_path, "--backend", "cpu",
                                      "--threads", "1", "--replicas", str(replicas), "--max-batch", str(max_batch),
                                      "--port", str(self.port), "--name", NAME],
                                     stdout=self.out, stderr=self.log, env=env)
        while "glowc: serving" not in open(self.out.name).read():
            if self.proc.poll() is not None or time.perf_counter() - t0 > timeout:
                self.stop()
                raise RuntimeError("glowc serve did not come up:\n" + open(self.log.name).read()[-3000:])
            time.sleep(0.5)
        self.startup_s = time.perf_counter() - t0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        self.out.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def check(outs, want, which):
    for i, o in outs:
        if not np.array_equal(o, want[i]):
            raise AssertionError(f"{which}: the answer to image {i} differs from glow_core.compile(...).run")


def offline(client, bodies, want, n, concurrency):
    """n requests, ``concurrency`` in flight: (requests per second, latencies in seconds)."""
    lat, outs, lock = [], [], threading.Lock()
    counter = iter(range(n))

    def worker():
        for k in iter(lambda: next(counter, None), None):
            i = k % len(bodies)
            t = time.perf_counter()
            o = client.infer(*bodies[i])
            with lock:
                lat.append(time.perf_counter() - t)
                outs.append((i, o))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for f in [pool.submit(worker) for _ in range(concurrency)]:
            f.result()
    wall = time.perf_counter() - t0
    check(outs, want, "offline")
    return n / wall, lat


def arrival_times(rate, args, seed) -> list[float]:
    """Poisson arrival times (seconds from the start) of one Server-scenario run: ``rate`` x ``--seconds`` requests,
    at least ``--min-requests`` (a p99 needs them) and at most ``--max-requests``, none after ``--max-seconds``."""
    rng = random.Random(seed)
    n = min(args.max_requests, max(args.min_requests, round(rate * args.seconds)))
    out, t = [], 0.0
    while len(out) < n:
        t += rng.expovariate(rate)
        if t > args.max_seconds:
            break
        out.append(t)
    return out


def server_scenario(client, bodies, want, rate, arrivals, workers):
    """Requests sent at ``arrivals`` (open loop): latencies from each request's scheduled arrival, and the rate
    achieved."""
    lat, outs, lock = [], [], threading.Lock()

    def one(k, due):
        i = k % len(bodies)
        o = client.infer(*bodies[i])
        with lock:
            lat.append(time.perf_counter() - due)
            outs.append((i, o))

    with ThreadPoolExecutor(workers) as pool:
        start = time.perf_counter()
        futs = []
        for k, a in enumerate(arrivals):
            delay = start + a - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            futs.append(pool.submit(one, k, start + a))
        for f in futs:
            f.result()
        wall = time.perf_counter() - start
    check(outs, want, f"server at {rate}/s")
    return lat, len(arrivals) / max(wall, 1e-9)


def search_rate(client, bodies, want, args, log):
    """The highest Poisson rate whose p99 stays under ``args.p99_ms``: rise by ``step`` until it fails, then bisect."""
    runs, lo, hi = [], None, None
    rate = args.start_rate

    def run(rate):
        lat, achieved = server_scenario(client, bodies, want, rate, arrival_times(rate, args, len(runs)),
                                        args.workers)
        p50, p99 = percentile(lat, 50) * 1e3, percentile(lat, 99) * 1e3
        runs.append({"rate": rate, "achieved": round(achieved, 1), "requests": len(lat), "p50_ms": round(p50, 2),
                     "p99_ms": round(p99, 2), "load": os.getloadavg()[0]})
        log(f"    server scenario {rate:7.1f}/s: {len(lat)} requests, p50 {p50:7.2f} ms, p99 {p99:7.2f} ms "
            f"(load {os.getloadavg()[0]:.1f})")
        return p99 < args.p99_ms

    while hi is None and rate <= args.max_rate:  # up by step while p99 holds
        if run(rate):
            lo = rate
            rate += args.step
        else:
            hi = rate
    rate = args.start_rate / 2
    while lo is None and rate >= args.min_rate:  # the start rate failed: halve until p99 holds
        if run(rate):
            lo = rate
        else:
            hi = rate
            rate = round(rate / 2, 2)
    if lo is not None and hi is not None:
        for _ in range(args.refine):
            mid = round((lo + hi) / 2, 1)
            if mid in (lo, hi):
                break
            if run(mid):
                lo = mid
            else:
                hi = mid
    return lo, runs


def ray_serve_floor(bodies, args, rate):
    """An echo deployment on its own Ray cluster in this process: (offline requests/s, p50 ms, p99 ms at rate)."""
    import ray
    from ray import serve
    from starlette.responses import Response

    class Echo:
        async def __call__(self, request):
            await request.body()
            return Response(b"{}", media_type="application/json")

    import logging
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    tmp = tempfile.mkdtemp(prefix="glowbench")
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=tmp, logging_level="warning")
    try:
        quiet = {"log_level": "WARNING"}
        serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config=quiet)
        serve.run(serve.deployment(Echo, ray_actor_options={"num_cpus": 1}, max_ongoing_requests=64).bind(),
                  name="echo", route_prefix="/", logging_config=quiet)
        local = threading.local()

        def call(body, headers):
            conn = getattr(local, "conn", None) or http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            local.conn = conn
            conn.request("POST", f"/v2/models/{NAME}/infer", body=body, headers=headers)
            r = conn.getresponse()
            r.read()
            assert r.status == 200, r.status

        for b in bodies:
            call(*b)
        t0, counter, lat = time.perf_counter(), iter(range(args.offline_requests)), []

        def worker():
            for k in iter(lambda: next(counter, None), None):
                call(*bodies[k % len(bodies)])

        with ThreadPoolExecutor(args.concurrency) as pool:
            for f in [pool.submit(worker) for _ in range(args.concurrency)]:
                f.result()
        tput = args.offline_requests / (time.perf_counter() - t0)
        due = arrival_times(rate, args, 0)
        with ThreadPoolExecutor(args.workers) as pool:
            start = time.perf_counter()

            def one(k, when):
                call(*bodies[k % len(bodies)])
                lat.append(time.perf_counter() - when)

            futs = []
            for k, a in enumerate(due):
                time.sleep(max(0.0, start + a - time.perf_counter()))
                futs.append(pool.submit(one, k, start + a))
            for f in futs:
                f.result()
        return tput, percentile(lat, 50) * 1e3, percentile(lat, 99) * 1e3
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def compute_floor(model, x, rounds, budget):
    """Median seconds of one image in this process: glow cpu (one thread) and onnxruntime (one thread)."""
    import onnxruntime as ort
    cm = glow_core.compile(model, "cpu", num_threads=1)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = min(m.ir_version, ORT_IR_VERSION)
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"input": x})[0], cm.run({"input": x})["output"], rtol=1e-3, atol=1e-3)
    fns = {"glow cpu": lambda: cm.run({"input": x}), "onnxruntime": lambda: sess.run(None, {"input": x})}
    times = alternating_rounds(fns, rounds, lambda k: statistics.median(timed_runs(fns[k], budget)))
    return {k: statistics.median(v) for k, v in times.items()}


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop glowc serve and its cluster


def main(argv=None):
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", default="1,2", help="replica counts to measure, in order (default 1,2)")
    ap.add_argument("--max-batch", type=int, default=8, help="glowc serve --max-batch (default 8)")
    ap.add_argument("--offline-requests", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight in the Offline scenario")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each Server-scenario run, unless "
                    "--min-requests needs longer")
    ap.add_argument("--min-requests", type=int, default=300, help="requests per Server-scenario run at least "
                    "(within --max-seconds)")
    ap.add_argument("--max-requests", type=int, default=2000, help="requests per Server-scenario run at most")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="length of a Server-scenario run at most")
    ap.add_argument("--start-rate", type=float, default=25.0)
    ap.add_argument("--step", type=float, default=25.0)
    ap.add_argument("--max-rate", type=float, default=1000.0)
    ap.add_argument("--min-rate", type=float, default=2.0, help="the lowest rate tried when the start rate fails")
    ap.add_argument("--refine", type=int, default=3)
    ap.add_argument("--p99-ms", type=float, default=50.0)
    ap.add_argument("--workers", type=int, default=64, help="client threads of the Server scenario")
    ap.add_argument("--startup-timeout", type=float, default=600.0)
    ap.add_argument("--no-echo", action="store_true", help="skip Ray Serve's echo floor")
    ap.add_argument("--quick", action="store_true", help="a smoke run: few requests, two rates, no floor rounds")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    if args.quick:
        args.offline_requests, args.seconds, args.max_requests, args.refine = 40, 2.0, 60, 0
        args.min_requests, args.max_seconds = 10, 5.0
        args.start_rate, args.step, args.max_rate, args.min_rate = 10.0, 10.0, 20.0, 5.0
    model = models.resnet(batch="N")
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(16)]
    ref = glow_core.compile(model, "cpu", num_threads=1)
    want = [ref.run({"input": x})["output"] for x in xs]
    bodies = [request_body(x) for x in xs]
    big = np.concatenate(xs[:args.max_batch])
    big_body, big_want = [request_body(big)], [ref.run({"input": big})["output"]]
    result = {"model": "example_models.resnet(batch='N') [N, 3, 32, 32]", "cpu_count": os.cpu_count(),
              "max_batch": args.max_batch, "p99_target_ms": args.p99_ms, "replicas": {}}
    print(f"glowc serve of {result['model']} on 127.0.0.1, cpu backend, 1 device x 1 thread per replica, "
          f"--max-batch {args.max_batch}; {os.cpu_count()} cores shared with the client", flush=True)
    floor = compute_floor(model, xs[0], 1 if args.quick else 7, 0.3 if args.quick else 1.0)
    result["in_process_ms"] = {k: v * 1e3 for k, v in floor.items()}
    print(f"  in process, one image, one thread (median, alternating): glow cpu {floor['glow cpu'] * 1e3:.2f} ms, "
          f"onnxruntime {floor['onnxruntime'] * 1e3:.2f} ms (glow / ort {floor['glow cpu'] / floor['onnxruntime']:.2f})",
          flush=True)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"{NAME}.onnx")
        onnx.save(model, path)
        for replicas in [int(r) for r in args.replicas.split(",")]:
            load0 = os.getloadavg()
            srv = Server(path, replicas, args.max_batch, args.startup_timeout)
            try:
                client = Client(srv.port, timeout=120)
                for b, w in zip(bodies, want):  # warm-up, and every image right once
                    check([(0, client.infer(*b))], [w], "warm-up")
                tput, lat = offline(client, bodies, want, args.offline_requests, args.concurrency)
                print(f"  {replicas} replica(s), started in {srv.startup_s:.0f} s: offline {tput:7.1f} requests/s "
                      f"({args.offline_requests} requests, {args.concurrency} in flight; p50 "
                      f"{percentile(lat, 50) * 1e3:.1f} ms, p99 {percentile(lat, 99) * 1e3:.1f} ms)", flush=True)
                big_tput, _ = offline(client, big_body, big_want, max(1, args.offline_requests // args.max_batch),
                                      args.concurrency)
                print(f"    offline with {args.max_batch} images per request: {big_tput * args.max_batch:7.1f} images/s",
                      flush=True)
                best, runs = search_rate(client, bodies, want, args, lambda s: print(s, flush=True))
                result["replicas"][replicas] = {
                    "startup_s": round(srv.startup_s, 1), "offline_rps": round(tput, 1),
                    "offline_images_per_s_batched_requests": round(big_tput * args.max_batch, 1),
                    "offline_p50_ms": round(percentile(lat, 50) * 1e3, 2),
                    "offline_p99_ms": round(percentile(lat, 99) * 1e3, 2),
                    "max_rate_p99_under_target": best, "server_runs": runs,
                    "load_before": load0, "load_after": os.getloadavg()}
                at = [r for r in runs if r["rate"] == best]
                print(f"  {replicas} replica(s): highest rate with p99 under {args.p99_ms:.0f} ms: "
                      + (f"{best:.1f}/s (p50 {at[0]['p50_ms']} ms, p99 {at[0]['p99_ms']} ms)" if best else
                         f"none from {args.start_rate}/s") + f"; load {load0[0]:.1f} -> {os.getloadavg()[0]:.1f}",
                      flush=True)
            finally:
                srv.stop()
    if not args.no_echo:
        lowest = min((r["rate"] for rep in result["replicas"].values() for r in rep["server_runs"]),
                     default=args.start_rate)
        tput, p50, p99 = ray_serve_floor(bodies, args, lowest)
        result["ray_serve_echo"] = {"offline_rps": round(tput, 1), "rate": lowest, "p50_ms": round(p50, 2),
                                    "p99_ms": round(p99, 2), "load": os.getloadavg()}
        print(f"  Ray Serve's floor (an echo deployment, 1 replica, same client): offline {tput:.1f} requests/s; "
              f"at {lowest}/s p50 {p50:.2f} ms, p99 {p99:.2f} ms (load {os.getloadavg()[0]:.1f})", flush=True)
    reps = result["replicas"]
    if 1 in reps and 2 in reps:
        print(f"  2 replicas / 1 replica: offline throughput {reps[2]['offline_rps'] / reps[1]['offline_rps']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
