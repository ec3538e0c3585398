"""``glowc serve MODEL --backend NAME``: the model on Ray Serve, over the Open Inference Protocol v2
(``glow_core.serve``), until SIGINT or SIGTERM.

Without ``--address`` (or ``RAY_ADDRESS``) it starts a local Ray cluster bound to 127.0.0.1 and shuts it down on
exit; with one it joins that cluster and on exit deletes only its own application. The model's OIP name is
``--name``, by default the file's stem. Once the model answers, one line on stdout says where
(``glowc: serving 'NAME' at http://HOST:PORT/v2/models/NAME``); errors are one line on stderr, status 1.
"""
from __future__ import annotations

import logging
import os
import random
import signal
import socket
import sys
import time

from glow_core.errors import GlowError
from glow_core.serve import INSTALL


class _Stop(BaseException):
    """SIGINT or SIGTERM arrived."""


def add_arguments(p, backend_help: str):
    p.add_argument("model")
    p.add_argument("--backend", required=True, help=backend_help)
    p.add_argument("--name", help="the model's name in the protocol's URLs (default: the file's stem)")
    p.add_argument("--replicas", type=int, default=1, metavar="N", help="Ray Serve replicas (default 1)")
    p.add_argument("--devices", type=int, default=1, metavar="N", help="devices of the backend per replica (default 1)")
    p.add_argument("--threads", type=int, metavar="N", help="threads of the backend per device (default: its own)")
    p.add_argument("--host", default="127.0.0.1", help="address the HTTP server binds (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, metavar="P", help="HTTP port (default 8000)")
    p.add_argument("--max-batch", type=int, default=8, metavar="N",
                   help="rows per request and per dynamic batch (default 8; 1: no batching)")
    p.add_argument("--device-timeout", type=float, default=30.0, metavar="S",
                   help="seconds a device run may take before the device counts as failed (default 30)")
    p.add_argument("--address", metavar="RAY_ADDRESS", help="join this Ray cluster instead of starting one")


def _on_signal(signum, frame):
    raise _Stop(signum)


def run(args) -> int:
    for flag, v in (("--replicas", args.replicas), ("--devices", args.devices), ("--max-batch", args.max_batch),
                    ("--port", args.port)):
        if v < 1:
            raise GlowError(f"{flag} {v}: give a positive number")
    if args.threads is not None and args.threads < 1:
        raise GlowError(f"--threads {args.threads}: give a positive number")
    try:
        import ray
        from ray import serve
    except ImportError as e:
        raise GlowError(f"glowc serve needs Ray Serve, which is not installed ({e}); install it with: {INSTALL}") \
            from None
    from glow_core.serve import deployment
    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # the driver's INFO lines; errors still print

    options = {} if args.threads is None else {"num_threads": args.threads}
    name = args.name or os.path.splitext(os.path.basename(args.model))[0]
    app = deployment(args.model, args.backend, devices=args.devices, max_batch_size=args.max_batch, name=name,
                     num_replicas=args.replicas, device_timeout_s=args.device_timeout, **options)
    address = args.address or os.environ.get("RAY_ADDRESS")
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    started = deployed = False
    try:
        try:
            if address:
                ray.init(address=address, logging_level="warning")
            else:
                started = True
                ray.init(num_cpus=max(os.cpu_count() or 1, args.replicas), include_dashboard=False,
                         _node_ip_address="127.0.0.1", logging_level="warning")
        except (_Stop, KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001  (Ray raises plain Exceptions, e.g. its 30 s node-startup deadline)
            where = f"join the Ray cluster at {address}" if address else "start a local Ray cluster"
            raise GlowError(f"could not {where}: {type(e).__name__}: {' '.join(str(e).split())}") from None
        for sig in (signal.SIGINT, signal.SIGTERM):  # ray.init installs its own SIGTERM handler
            signal.signal(sig, _on_signal)
        serve.start(http_options={"host": args.host, "port": args.port}, logging_config={"log_level": "WARNING"})
        deployed = True
        serve.run(app, name=name, route_prefix="/", logging_config={"log_level": "WARNING"})
        print(f"glowc: serving '{name}' at http://{args.host}:{args.port}/v2/models/{name} (Open Inference Protocol "
              f"v2, {args.replicas} replica(s) of {args.devices} {args.backend} device(s)); SIGINT or SIGTERM stops",
              flush=True)
        while True:
            time.sleep(3600)
    except _Stop as e:
        print(f"glowc: {signal.Signals(e.args[0]).name}: stopping", file=sys.stderr, flush=True)
    except RuntimeError as e:  # Ray Serve's deployment failures (a replica's constructor raised)
        raise GlowError(f"serving '{name}' failed: {' '.join(str(e).split())[-2000:]}") from None
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # the shutdown below is not to be interrupted
            signal.signal(sig, signal.SIG_IGN)
        try:
            if deployed and started:
                serve.shutdown()
            elif deployed:
                serve.delete(name)
        finally:
            if ray.is_initialized():
                ray.shutdown()
    return 0


def free_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999) and above Ray's worker ports (10002-19999): a port
    the kernel hands out itself can be taken by another process's outgoing connection (a running Ray cluster makes
    many) before the server binds it."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise GlowError("no free loopback port in 20000-32767")
