"""mypy sees the payload and result types of typed task handles: tests/typing/handles.py holds
``assert_type`` checks that mypy must accept, and code that passes the wrong payload, or reads
a result as the wrong type, must be refused."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mypy(*paths: str) -> tuple[str, int]:
    api = pytest.importorskip("mypy.api")
    stdout, stderr, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--no-incremental", *paths]
    )
    return stdout + stderr, status


@pytest.mark.slow
def test_handle_types_check_and_wrong_ones_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    wrong = tmp_path / "wrong_handles.py"
    wrong.write_text(
        textwrap.dedent(
            """
            from fairlane import Client, RunContext
            from tests.typing.handles import Receipt, count_rows, send_receipt


            def wrong_payloads(client: Client) -> None:
                send_receipt.trigger(client, {"order": 1})
                count_rows.trigger(client, Receipt(order=1))


            async def wrong_result(ctx: RunContext) -> None:
                sent = await send_receipt.trigger_and_wait(ctx, Receipt(order=1))
                number: int = sent
            """
        )
    )
    output, status = _mypy(str(ROOT / "tests/typing/handles.py"), str(wrong))
    errors = [line for line in output.splitlines() if ": error:" in line]
    assert status == 1, output
    assert all(line.startswith(str(wrong)) for line in errors), "handles.py must type-check"
    assert len(errors) == 3, output
    assert 'has incompatible type "dict[str, int]"; expected "Receipt"' in errors[0]
    assert 'has incompatible type "Receipt"; expected "dict[str, Any]"' in errors[1]
    assert 'expression has type "Sent", variable has type "int"' in errors[2]
