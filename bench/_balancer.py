"""A second nginx beside the fleet's, with one port per replica count: port ``k`` balances
over the first ``k`` backends (the fleet's replicas, or the floor's minimal proxies). Its
upstreams and locations include the fleet's own rule files (``upstream.conf``,
``proxy.conf``, ``errors.conf``, written by ``scripts/fleet.sh``), so it balances exactly as
the fleet's nginx does.

With every replica running throughout, the benchmark switches between 1, 2 and 3 replicas
serving by switching ports: no replica is stopped or started between measurements (a fresh
process pays for its imports and first requests in the next window), so the levels can be
interleaved round after round and drift of the machine hits them alike.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench._process import free_port
from tests.support.fleet import HOST, Fleet


@dataclass(frozen=True)
class Balancer:
    home: Path
    ports: dict[int, int]
    """Replica count → the port balancing over that many replicas."""

    def url(self, replicas: int) -> str:
        return f"http://{HOST}:{self.ports[replicas]}"

    def pids(self) -> list[int]:
        """Master and workers, whose CPU a request through this balancer costs."""
        master = int((self.home / "nginx.pid").read_text().strip())
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        return [master, *(int(c) for c in children)]


def _config(rules: Path, home: Path, backends: list[int], ports: dict[int, int]) -> str:
    blocks: list[str] = []
    for count, port in ports.items():
        servers = "".join(
            f"        server {HOST}:{backend} max_fails=1 fail_timeout=2s;\n"
            for backend in backends[:count]
        )
        blocks.append(
            f"    upstream replicas_{count} {{\n{servers}"
            f"        include {rules}/upstream.conf;\n    }}\n"
            f"    server {{\n        listen {HOST}:{port};\n"
            f"        location / {{\n            proxy_pass http://replicas_{count};\n"
            f"            include {rules}/proxy.conf;\n        }}\n"
            f"        include {rules}/errors.conf;\n    }}\n"
        )
    temp = home / "temp"
    user = "user root;\n" if os.geteuid() == 0 else ""  # as fleet.sh: root's workers stay root
    return (
        f"{user}worker_processes 1;\n"
        f"pid {home}/nginx.pid;\nerror_log {home}/error.log warn;\n"
        "events { worker_connections 1024; }\nhttp {\n    access_log off;\n"
        f"    client_body_temp_path {temp}/body;\n    proxy_temp_path {temp}/proxy;\n"
        f"    fastcgi_temp_path {temp}/fastcgi;\n    uwsgi_temp_path {temp}/uwsgi;\n"
        f"    scgi_temp_path {temp}/scgi;\n    client_max_body_size 2m;\n" + "".join(blocks) + "}\n"
    )


@contextmanager
def balancers(fleet: Fleet, name: str, backends: list[int]) -> Iterator[Balancer]:
    """An nginx over ``backends`` (ports on loopback) with the fleet's rules, for the
    block; stopped at the end of it."""
    home = fleet.home / f"bench-nginx-{name}"
    (home / "temp").mkdir(parents=True, exist_ok=True)
    ports = {count: free_port() for count in range(1, len(backends) + 1)}
    config = home / "nginx.conf"
    config.write_text(_config(fleet.home / "nginx", home, backends, ports))
    command = ["nginx", "-p", str(home), "-c", str(config)]
    subprocess.run(command, check=True, capture_output=True, timeout=30)
    balancer = Balancer(home, ports)
    try:
        deadline = time.monotonic() + 10
        while len(balancer.pids()) < 2:  # the worker is forked after the master writes its pid
            if time.monotonic() > deadline:
                raise RuntimeError(f"the benchmark's nginx started no worker ({home})")
            time.sleep(0.05)
        yield balancer
    finally:
        subprocess.run([*command, "-s", "quit"], check=False, capture_output=True, timeout=30)
