"""With PROMETHEUS_MULTIPROC_DIR, /metrics sums the counters of every uvicorn worker, whichever one answers."""

import re

import httpx2
import pytest

from tests.mcp.test_transport import modern_call, modern_headers
from tests.processes import uvicorn_server

pytestmark = pytest.mark.django_db(transaction=True)
SAMPLE = re.compile(r'^leroy_mcp_tool_calls_total\{outcome="ok",tool="probe_echo"\} (\S+)$', re.MULTILINE)


def test_two_workers_report_one_sum(tmp_path):
    with (
        uvicorn_server(workers=2, PROMETHEUS_MULTIPROC_DIR=str(tmp_path)) as server,
        httpx2.Client(base_url=server.url, timeout=10) as http,
    ):
        for _ in range(12):
            # A new connection each time, so the calls spread over both workers.
            httpx2.post(
                server.url + "/api/mcp",
                json=modern_call("probe_echo", {"text": "x"}),
                headers=modern_headers("tools/call", "probe_echo"),
                timeout=10,
            )
        scrapes = [http.get("/metrics", headers={"Connection": "close"}).text for _ in range(4)]
        worker_files = {p.name.split("_")[-1] for p in tmp_path.glob("counter_*.db")}

    assert len(worker_files) == 2  # both workers served calls and wrote their own samples
    assert [SAMPLE.search(text).group(1) for text in scrapes] == ["12.0"] * 4
