"""Skills on a real Celery worker over a real broker (Redis in CI, in both of its passes): the worker runs
the skill in the sandbox as the original caller and records its result, which the dispatching request
reads from the execution."""

import time

import pytest

from accounts.models import PersonalToken
from core.caller import Caller
from integrations import skills
from integrations.models import Execution, Integration, Skill
from tests.conftest import make_member
from tests.live.test_run_worker import queue, worker  # noqa: F401 (queue is a fixture)

pytestmark = [
    pytest.mark.live,
    pytest.mark.uses_broker,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

SOURCE = """\
def run(input, atrium):
    answer = atrium.call("weather_tools.FORECAST", {"city": input["city"]})
    return {"city": input["city"], "answer": answer}
"""


def answer_as_caller(*, caller: Caller, name: str, input: dict, parent: Execution) -> dict:
    """The worker imports this as the skill's call_action: it says who the call ran as."""
    return {"user": caller.user.username, "scopes": sorted(caller.scopes), "token": caller.token.label,
            "name": name, "parent": parent.pk}


def test_a_worker_runs_the_skill_as_the_caller_and_the_request_reads_its_result(queue, tmp_path):  # noqa: F811
    alice = make_member("alice", scopes=["capabilities:execute"])
    caller = Caller(user=alice.user, scopes=frozenset({"capabilities:execute"}), via="mcp",
                    token=PersonalToken.objects.get(user=alice.user))
    weather = Integration.objects.create(id="weather_tools", name="Weather")
    skill = Skill.objects.create(owner=alice.user, name="forecast_skill", source_code=SOURCE)
    skill.integrations.set([weather])
    execution = Execution.objects.create(user=alice.user, name=skill.name, kind="skill", skill=skill, via="mcp")
    log = tmp_path / "worker.log"

    with worker(queue, log):
        # A worker still starting up answers after the wait: the result then lands on the row.
        result = skills.skill_dispatch(caller=caller, skill=skill, input={"city": "Oslo"}, execution=execution,
                                       call_action=answer_as_caller, wait_seconds=60)
        deadline = time.monotonic() + 60
        while (execution := Execution.objects.get(pk=execution.pk)).status == "running":
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.25)

    assert result == execution.result, log.read_text()
    assert execution.status == "succeeded", execution.error
    assert execution.result["output"] == {"city": "Oslo", "answer": {
        "user": "alice", "scopes": ["capabilities:execute"], "token": "tests", "name": "weather_tools.FORECAST",
        "parent": execution.pk}}
    assert "integrations.tasks.skill_execute" in log.read_text()
