"""The query parameters several of the results API's routers take (scoring profile, paging)
and the page they answer a list with."""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from fastapi import Query
from pydantic import BaseModel

from streameval.scorer.profiles import SCORING_PROFILES

T = TypeVar("T")
DEFAULT_PROFILE = "trace-paper-v1"
ProfileParam = Annotated[str, Query(description=f"scoring profile: {', '.join(SCORING_PROFILES)}")]
Offset = Annotated[int, Query(ge=0)]
Limit = Annotated[int, Query(ge=1, le=1000)]


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int


def page(items: list, offset: int, limit: int) -> dict[str, Any]:
    """The items from `offset`, at most `limit` of them, with how many there are in all."""
    return {
        "items": items[offset : offset + limit],
        "total": len(items),
        "offset": offset,
        "limit": limit,
    }
