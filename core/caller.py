"""Who is calling: every service and selector takes one, and every query is scoped by it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from accounts.scopes import ALL_SCOPES

if TYPE_CHECKING:
    from oauth2_provider.models import AccessToken

    from accounts.models import McpSession, PersonalToken, User


@dataclass(frozen=True)
class Caller:
    user: User
    scopes: frozenset[str]
    via: str  # an AuditEvent.Via value
    token: PersonalToken | AccessToken | None = None
    session: McpSession | None = None

    @classmethod
    def trusted(cls, user: User, *, via: str, session: McpSession | None = None) -> Caller:
        """A caller with every scope: an operator's command, a signed-in admin, a stdio process."""
        return cls(user=user, scopes=ALL_SCOPES, via=via, session=session)

    def with_session(self, session: McpSession | None) -> Caller:
        return replace(self, session=session)

    @property
    def token_kind(self) -> str:
        from accounts.models import PersonalToken

        if self.token is None:
            return "stdio" if self.session is not None and self.session.transport == "stdio" else "session"
        return "personal" if isinstance(self.token, PersonalToken) else "oauth"

    @property
    def credential(self) -> str:
        """The credential in words, for the audit log and auth_status."""
        kind = self.token_kind
        if kind == "personal":
            return f"personal token '{self.token.label}' ({self.token.prefix}…)"
        if kind == "oauth":
            return f"OAuth token for client '{self.token.application.name or self.token.application.client_id}'"
        if kind == "stdio":
            return "stdio process"
        if self.via == "command":
            return "management command"
        return "signed-in session"
