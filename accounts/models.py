from typing import Any, ClassVar

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models
from django.db.models import Q

from leroy.clock import now

SCOPE_READ = "mcp:read"
SCOPE_WRITE = "mcp:write"


class UserManager(BaseUserManager["User"]):
    use_in_migrations = True

    def create_user(self, email: str, password: str | None = None, **extra: Any) -> "User":
        if not email:
            raise ValueError("An email address is required")
        user = self.model(email=self.normalize_email(email).lower(), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email: str, password: str | None = None, **extra: Any) -> "User":
        extra.setdefault("is_staff", True)
        extra.setdefault("is_superuser", True)
        return self.create_user(email, password, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    """One person and their account: Leroy's unit of ownership, quota and billing."""

    email = models.EmailField(unique=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False)
    date_joined = models.DateTimeField(default=now)
    # MCP access is opt-in: no key can be created before the owner activates it.
    mcp_activated_at = models.DateTimeField(null=True, blank=True)
    # Closed by its owner: inactive for good, its address removed (the ledger's rows still name the account).
    closed_at = models.DateTimeField(null=True, blank=True)
    # The last move to another address: an e-mail change link asked for before it no longer works (the address
    # alone would let a link revive once the account came back to the address it named).
    email_changed_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[UserManager] = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"

    def __str__(self) -> str:
        return self.email

    @property
    def mcp_active(self) -> bool:
        return self.mcp_activated_at is not None


class ApiKey(models.Model):
    """A developer credential for /api/mcp. Only an HMAC of the key is stored; the plaintext is shown once."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_keys")
    # Its number among its account's keys (1, 2, ...): what the account page names it by. The table's own id counts
    # every account's keys, so showing it told each user how many keys all the others had made.
    number = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=8, db_index=True)  # first 8 characters after "lr_live_"
    last4 = models.CharField(max_length=4, blank=True, default="")  # shown so the owner can tell keys apart
    key_hash = models.CharField(max_length=64, unique=True)  # HMAC-SHA256(pepper, key), hex
    scopes = models.CharField(max_length=100)  # space-separated, e.g. "mcp:read mcp:write"
    created_at = models.DateTimeField(default=now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["user", "number"], name="apikey_number_unique"),
            models.CheckConstraint(
                condition=Q(scopes="mcp:read") | Q(scopes="mcp:read mcp:write"), name="apikey_scopes_known"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (lr_live_{self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @property
    def scope_list(self) -> list[str]:
        return self.scopes.split()


class RedeemedCode(models.Model):
    """An OAuth authorization code already exchanged, kept briefly so that a replay revokes what it issued."""

    code_sha256 = models.CharField(max_length=64, unique=True)
    token_family = models.UUIDField()
    expires = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"redeemed code {self.code_sha256[:8]}…"
