"""Schemathesis over the server's own OpenAPI schema: no 5xx, and responses match the schema.

All of schemathesis's checks run but one: "schema-valid data is accepted" cannot hold here, since
whether an expert id, a context or a decision id exists depends on the router, not on the schema
(such requests get the documented 404/422).

The server serves the example config (the schema's examples are written for it, so they are
accepted). Every operation of the schema gets a bounded number of generated requests (derandomized,
including the schema's examples), all sent to a real server; the test has a time cap.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.checks import positive_data_acceptance

from _server import ServerProcess
from _service import AUTH, TOKEN

pytestmark = pytest.mark.timeout(300)

EXAMPLES_PER_OPERATION = 30


def test_api_conforms_to_its_schema(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "serve.toml"
    with ServerProcess(example, tmp_path, token=TOKEN, log=tmp_path / "server.log") as server:
        schema = schemathesis.openapi.from_url(server.url + "/openapi.json", headers=AUTH)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) == 12
        for operation in operations:

            @hypothesis.given(case=operation.as_strategy())
            @hypothesis.settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                derandomize=True,
                database=None,
                phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
                suppress_health_check=list(hypothesis.HealthCheck),
            )
            def check(case: schemathesis.Case) -> None:
                if case.path_parameters and "name" in case.path_parameters:
                    case.path_parameters["name"] = "chat"  # unknown ones: test_service_api
                case.call_and_validate(
                    base_url=server.url,
                    headers=AUTH,
                    timeout=20,
                    excluded_checks=[positive_data_acceptance],
                )

            check()
        # The server survived all of it and still routes.
        resp = httpx.post(
            server.url + "/v1/routers/chat/decisions",
            json={"context": "code"},
            headers=AUTH,
            timeout=20,
        )
        assert resp.status_code == 201, resp.text
