"""The REST API's own surface: /api/me, the OpenAPI schema and its UI, health."""

import pytest

pytestmark = pytest.mark.django_db


def test_me_describes_the_token_holder(alice, client):
    response = client.get("/api/me", HTTP_AUTHORIZATION=f"Bearer {alice.token}")

    assert response.status_code == 200
    assert response.json()["user"]["username"] == "alice"
    assert response.json()["token"]["kind"] == "personal"


def test_me_needs_credentials(db, client):
    response = client.get("/api/me")

    assert response.status_code == 401
    assert response.json() == {"error": "Authentication credentials were not provided.", "code": "not_authenticated"}


def test_a_signed_in_browser_session_works_too(alice, client):
    client.force_login(alice.user)

    assert client.get("/api/me").json()["token"]["kind"] == "session"


def test_the_openapi_schema_documents_bearer_auth(db, client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    schema = response.json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert {"/api/me", "/api/tokens", "/api/tokens/{token_id}", "/api/scopes"} <= schema["paths"].keys()


def test_the_api_docs_page_serves_its_assets_locally(db, client):
    page = client.get("/api/docs/").content.decode()

    assert "swagger-ui" in page
    assert "cdn.jsdelivr.net" not in page


def test_scopes_are_listed_with_their_words(alice, client):
    scopes = client.get("/api/scopes", HTTP_AUTHORIZATION=f"Bearer {alice.token}").json()

    assert {"name": "docs:read", "description": "Read and search the documentation"} in scopes
    assert len(scopes) == 23


def test_the_home_and_login_pages_render(db, client):
    assert b"/mcp" in client.get("/").content
    assert client.get("/accounts/login/").status_code == 200


@pytest.mark.parametrize("path", ["/api/nope/", "/api/capabilities/skills/1/2/", "/api/kb/pages/a%0Ab/"])
def test_a_url_no_endpoint_routes_is_answered_in_json_under_the_api(db, client, path):
    response = client.get(path)

    assert (response.status_code, response["Content-Type"]) == (404, "application/json")
    assert response.json() == {"error": "No endpoint or resource at this URL.", "code": "not_found"}


def test_a_url_no_page_routes_is_the_sites_page(db, client):
    response = client.get("/nowhere/")

    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")
