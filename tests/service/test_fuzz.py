"""Property-based fuzzing of the HTTP API from its own OpenAPI schema (schemathesis): no 5xx, no schema violation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.core.result import Err, Ok
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.service.harness import live_server
from transduce.engine.translator import Translator

STATUSES: Counter[int] = Counter()
FUZZ_EXAMPLES = 1100  # for POST /translate; the GET operations have no parameters to vary


@pytest.fixture(scope="module", autouse=True)
def hypothesis_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hypothesis keeps caches (unicode tables, constants) in ./.hypothesis: keep them out of the repository."""
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield
    set_hypothesis_home_dir(None)  # back to HYPOTHESIS_STORAGE_DIRECTORY or ./.hypothesis


@pytest.fixture(scope="module")
def fuzz_url(tiny_translator: Translator) -> Iterator[str]:
    """Small limits keep each generated request cheap; behaviour over a limit is a 4xx all the same."""
    with live_server(
        tiny_translator,
        max_chars=300,
        max_items=5,
        max_beam_size=2,
        default_beam_size=2,
        max_alternatives=1,
        max_wait_ms=0.0,
        request_timeout_s=10.0,
    ) as url:
        yield url


def test_api_never_fails_and_matches_its_schema(fuzz_url: str) -> None:
    """Every operation of the published schema; POST /translate gets FUZZ_EXAMPLES generated requests."""
    from hypothesis import given

    schema = schemathesis.openapi.from_url(f"{fuzz_url}/openapi.json")
    results = list(schema.get_all_operations())
    broken = [r.err() for r in results if isinstance(r, Err)]
    assert not broken, broken
    operations = [r.ok() for r in results if isinstance(r, Ok)]
    assert {op.label for op in operations} >= {"POST /translate", "GET /languages", "GET /health/ready"}
    for op in operations:

        @given(case=op.as_strategy())
        @settings(
            max_examples=FUZZ_EXAMPLES if op.method == "post" else 5,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def check(case: Any) -> None:
            # 400 for a schema-valid but unsupported language pair is correct, so that one check is left out
            response = case.call_and_validate(base_url=fuzz_url, excluded_checks=[positive_data_acceptance])
            STATUSES[response.status_code] += 1
            assert response.status_code < 500

        check()
    total = sum(STATUSES.values())
    print(f"fuzz: {total} requests, statuses {dict(sorted(STATUSES.items()))}")
    assert total >= 1000
    assert not any(code >= 500 for code in STATUSES)
