"""The scope catalogue: every scope a token can carry, with the words the consent page shows.

The data migration seeds the Scope table from this list; tools name the scope they need when
they are declared (core.tools.tool).
"""

SCOPES: tuple[tuple[str, str], ...] = (
    ("capabilities:search", "Search capabilities, skills and integrations"),
    ("capabilities:read", "Read the details of capabilities and integrations"),
    ("capabilities:execute", "Run capabilities on your behalf"),
    ("integrations:read", "See which integrations are connected"),
    ("integrations:connect", "Connect and disconnect integrations"),
    ("playbooks:read", "Read your playbooks and their history"),
    ("playbooks:create", "Create playbooks"),
    ("playbooks:execute", "Run your playbooks"),
    ("playbooks:manage", "Turn playbook triggers on and off"),
    ("templates:read", "Browse playbook templates"),
    ("templates:use", "Create playbooks from templates"),
    ("dashboard:read", "See the dashboard and playbook executions"),
    ("sandbox:read", "Read sandbox state"),
    ("sandbox:execute", "Run code in the sandbox"),
    ("elements:read", "Read your personas, skills, templates, agents, memories and ensembles"),
    ("elements:write", "Create and change your elements"),
    ("elements:delete", "Delete your elements"),
    ("elements:execute", "Confirm operations the gatekeeper asks about, and run agents"),
    ("workflows:read", "Read, validate and audit workflows"),
    ("workflows:write", "Create, change and delete workflows and skills"),
    ("runs:read", "See workflow runs and their history"),
    ("runs:execute", "Start, advance, resume and cancel workflow runs"),
    ("docs:read", "Read and search the documentation"),
)

ALL_SCOPES: frozenset[str] = frozenset(name for name, _ in SCOPES)

# Which product's tools each scope's prefix gates, for pages that group scopes.
PRODUCTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Elements (DollhouseMCP)", ("elements",)),
    ("Workflows, runs and docs (Roscoe)", ("workflows", "runs", "docs")),
    ("Capabilities and playbooks (Aident)", ("capabilities", "integrations", "playbooks", "templates", "dashboard",
                                             "sandbox")),
)


def scopes_by_product() -> list[tuple[str, list[tuple[str, str]]]]:
    """(product, [(scope, what it allows)]) in the catalogue's order."""
    return [(product, [(name, words) for name, words in SCOPES if name.split(":")[0] in prefixes])
            for product, prefixes in PRODUCTS]


def scopes_sync(scope_model: type) -> None:
    """Make the Scope table match SCOPES (names and words). Data migrations call it with their
    historical model, so it uses nothing but the model's manager."""
    for name, description in SCOPES:
        scope_model.objects.update_or_create(name=name, defaults={"description": description})
