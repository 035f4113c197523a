"""Twenty requests for a slot at once, on real connections: one user's skills never run more than
ATRIUM_SKILL_CONCURRENCY_PER_USER at a time."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from core.caller import Caller
from integrations import services
from integrations.models import Execution, Skill

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

THREADS = 20


def test_twenty_concurrent_claims_take_only_the_users_slots(alice, bob, settings):
    settings.ATRIUM_SKILL_CONCURRENCY_PER_USER = 3
    skill = Skill.objects.create(name="slow_skill", source_code="def run(input, atrium):\n    return 1\n")
    callers = {name: Caller.trusted(member.user, via="api") for name, member in (("alice", alice), ("bob", bob))}

    def claim(index: int) -> str:
        caller = callers["bob" if index % 10 == 0 else "alice"]
        try:
            services.skill_execution_claim(caller=caller, skill=skill, input={})
            return "claimed"
        except services.RateLimited:
            return "refused"
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        outcomes = list(pool.map(claim, range(THREADS)))

    # 18 of alice's asked and 3 got one; bob's 2 are his own and not held up by hers.
    assert outcomes.count("claimed") == 5 and outcomes.count("refused") == 15
    running = Execution.objects.filter(kind="skill", status="running")
    assert running.filter(user=alice.user).count() == 3 and running.filter(user=bob.user).count() == 2


def test_twenty_concurrent_creates_of_one_name_make_one_skill_and_refuse_the_rest(alice):
    caller = Caller.trusted(alice.user, via="api")

    def create(index: int) -> str:
        try:
            services.skill_create(caller=caller, name="same_name", description=f"try {index}",
                                  source_code="def run(input, atrium):\n    return 1\n")
            return "created"
        except services.SkillExists:
            return "exists"
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        outcomes = list(pool.map(create, range(THREADS)))

    assert outcomes.count("created") == 1 and outcomes.count("exists") == THREADS - 1
    assert Skill.objects.filter(name="same_name").count() == 1
