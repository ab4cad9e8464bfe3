"""Reads for accounts; every one is scoped to the user it is asked for."""

from django.db.models import QuerySet

from accounts.models import ApiKey, User


def api_key_list(*, user: User) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(user=user)


def api_key_active_count(*, user: User) -> int:
    return ApiKey.objects.filter(user=user, revoked_at__isnull=True).count()
