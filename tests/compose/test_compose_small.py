"""infra/docker/compose.small.yml, offline: the stack for a laptop with 8 GB.

It must merge onto docker-compose.yml (with the local images too), keep every service and
command of the stack but the workers' offered memory, and bound what the stack's long-running
services may take together well inside 8 GB. The stack ran under it for real with the demo
load (README, "Memory and cores": 4.4 GiB at most).
"""

from __future__ import annotations

import re

import yaml

from streamstate_stack.servers import heap_options
from tests.compose.compose_files import COMPOSE_FILE, LOCAL_IMAGES_FILE, compose_config_without_dot_env

SMALL_FILE = COMPOSE_FILE.parent / "infra" / "docker" / "compose.small.yml"
LAPTOP_BYTES = 8 * 1024**3
ONE_SHOT = {"secrets", "topics", "minio-init"}


def merged(*files) -> dict:
    result = compose_config_without_dot_env(COMPOSE_FILE, *files)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


def _bytes(limit) -> int:
    if isinstance(limit, int) or str(limit).isdigit():
        return int(limit)
    number, unit = re.fullmatch(r"(\d+)([kmg])b?", str(limit).lower()).groups()
    return int(number) * 1024 ** "kmg".index(unit) * 1024


def test_the_small_file_keeps_every_service_and_bounds_the_long_running_ones_inside_8_gb():
    default, small = merged(), merged(SMALL_FILE)
    assert set(small) == set(default)
    running = {name: _bytes(service["mem_limit"]) for name, service in small.items() if name not in ONE_SHOT}
    assert all(running[name] <= _bytes(default[name]["mem_limit"]) for name in running), running
    assert sum(running.values()) < LAPTOP_BYTES, f"{sum(running.values()) / 1024**3:.1f} GiB of limits"
    for worker in ("spark-worker-1", "spark-worker-2"):
        command, before = small[worker]["command"], default[worker]["command"]
        assert command[command.index("--memory") + 1] == "1g"
        assert [a for i, a in enumerate(command) if command[i - 1] != "--memory"] == [a for i, a in enumerate(before) if before[i - 1] != "--memory"]


def test_the_small_file_merges_onto_the_local_images_too():
    assert merged(LOCAL_IMAGES_FILE, SMALL_FILE)["kafka"]["image"].startswith("streamstate-local/kafka:")


def test_the_small_broker_has_the_brokers_heap_options_but_for_the_heap_size():
    options = merged(SMALL_FILE)["kafka"]["environment"]["KAFKA_HEAP_OPTS"].split()
    assert options == heap_options(options[0].removeprefix("-Xmx"))
