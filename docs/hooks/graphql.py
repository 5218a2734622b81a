"""The GraphQL schema's reference: the SDL exported from the server's Strawberry schema."""

from __future__ import annotations


def graphql_reference() -> str:
    from agentloop.orchestration.web.schema import build_schema

    return "```graphql\n" + build_schema().as_str().strip() + "\n```\n"
