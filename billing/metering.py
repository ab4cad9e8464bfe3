"""Metering at the tool edge: the one place a lookup-metered answer is fingerprinted, cached, charged and stored.

A core computes an `Answer` (its fields and the lookups it consumed) and knows no price. A metered tool's edge hands
that computation to `metered_answer`, which charges it through the ledger in one transaction with the stored
response, so a retried `client_request_id` replays the original answer and a failure after the charge leaves
nothing behind.
"""

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.db import transaction
from pydantic import BaseModel

from accounts.models import User
from billing import selectors, services
from leroy import charged
from leroy.schemas import Answer

ANSWER_CACHE_SECONDS = 15 * 60


def request_fingerprint(tool: str, args: BaseModel) -> str:
    """What makes two requests the same request: the tool and its arguments, without the idempotency key."""
    body = {"tool": tool, **args.model_dump(mode="json", exclude={"client_request_id"})}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def metered_answer[T: BaseModel](
    *,
    user: User,
    tool: str,
    args: BaseModel,
    output: type[T],
    compute: Callable[[], Answer],
    cache_scope: str | None = None,
    cache_args: BaseModel | None = None,
    finish: Callable[[T], T] | None = None,
) -> T:
    """Compute (or reuse) an answer and charge its lookups: 0 when nothing was looked up, 0 for an identical
    request answered again within `cache_scope` (e.g. the same frame of the same artifact), else its lookups.
    `cache_args`, when given, name the answer in the cache instead of `args` (e.g. with a default resolved to the id
    it stands for, so both ways of naming one answer are one entry); idempotency still goes by `args`.

    `finish` completes an answer once its usage is known (it runs after the charge, inside its transaction: if it
    fails, the charge is rolled back). A retried `client_request_id` returns the stored answer unchanged.
    """
    fingerprint = request_fingerprint(tool, args)
    cached_as = request_fingerprint(tool, cache_args if cache_args is not None else args)
    cache_key = f"leroy:answer:{tool}:{user.pk}:{cached_as}:{cache_scope}" if cache_scope is not None else None
    cached: dict[str, Any] | None = cache.get(cache_key) if cache_key is not None else None
    answer = Answer(cached["fields"], cached["lookups"]) if cached is not None else compute()

    def complete(usage: dict[str, Any]) -> T:
        result = output.model_validate({**answer.fields, "usage": usage})
        return finish(result) if finish is not None else result

    completed: list[tuple[T, dict[str, Any]]] = []

    def respond(usage: dict[str, Any]) -> dict[str, Any]:
        result = complete(usage)
        completed.append((result, result.model_dump(mode="json")))  # the one dump: stored, replayed and cached
        return completed[0][1]

    with transaction.atomic():
        if answer.lookups == 0:
            charged.lookups(0)
            return complete({**selectors.lookup_usage(user=user), "lookup_cost": 0, "cache": "miss"})
        charge = services.lookup_charge(
            user=user,
            tool=tool,
            units=answer.lookups,
            request_fingerprint=fingerprint,
            client_request_id=getattr(args, "client_request_id", None),
            cache_hit=cached is not None,
            respond=respond,
        )
        # Noted once the transaction commits: a charge rolled back was never made.
        transaction.on_commit(lambda: charged.lookups(0 if charge.replayed else charge.units_charged))
        if charge.replayed and charge.stored_response is not None:
            return output.model_validate(charge.stored_response)
        if not completed:  # a retry of a request whose answer was never stored: answer it, store nothing
            respond(charge.usage)
        result, stored = completed[0]
    if cache_key is not None and cached is None:
        fields = {name: value for name, value in stored.items() if name != "usage"}
        cache.set(cache_key, {"fields": fields, "lookups": answer.lookups}, ANSWER_CACHE_SECONDS)
    return result
